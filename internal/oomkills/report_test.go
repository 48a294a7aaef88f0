package oomkills

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/podevents"
)

// records is a log holding recs, then ending; before[i] runs before the
// i-th is read (the kernel counting its kills as it logs them).
type records struct {
	recs   []string
	before map[int]func()
	n      int
}

func (s *records) Read() (kmsg.Record, error) {
	if s.n == len(s.recs) {
		return kmsg.Record{}, errors.New("closed")
	}
	if do := s.before[s.n]; do != nil {
		do()
	}
	s.n++
	return kmsg.ParseRecord([]byte(s.recs[s.n-1]))
}
func (s *records) SetDeadline(time.Time) error { return nil }
func (s *records) Close() error                { return nil }

type events struct{ got []string }

func (e *events) Warning(pod podevents.Pod, container, reason, message string) {
	e.got = append(e.got, fmt.Sprintf("%s/%s %s %s", pod.Namespace, pod.Name, container, reason))
}

// The reporter reads containers only through its Lookup: a kill its record
// names is that container's, one without its record the container's whose
// count holds it, and each is told in its books.
func TestKillsThroughTheLookup(t *testing.T) {
	root, ctrs := cgroupV2Node(t, 2)
	a, b := ctrs.ctrs["ctr0"], ctrs.ctrs["ctr1"]
	node := enforce.NewNode(root, nil)
	var logs bytes.Buffer
	ev := &events{}
	m := NewMetrics()
	r := New(Options{Root: root, Node: func() *enforce.Node { return node }, Containers: ctrs,
		Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m, Events: ev})
	r.Added(a.ID) // started: their counts kept from now on
	r.Added(b.ID)
	src := &records{recs: []string{
		fmt.Sprintf("6,1,1001,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=%s,task_memcg=%s,task=hog,pid=5001,uid=0", a.CgroupsPath, a.CgroupsPath),
		"3,2,1002,-;Memory cgroup out of memory: Killed process 5001 (hog) total-vm:1000kB, anon-rss:500kB, file-rss:20kB, shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:900",
		"3,3,3000000,-;Memory cgroup out of memory: Killed process 6001 (other) total-vm:1000kB, anon-rss:500kB, file-rss:20kB, shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:900",
	}, before: map[int]func(){
		0: func() { setKills(t, root, a.CgroupsPath, 1); setKills(t, root, "", 1) },
		2: func() { setKills(t, root, b.CgroupsPath, 1); setKills(t, root, "", 2) },
	}}
	r.Watch(context.Background(), Log{Open: func(bool) (Source, error) { return src, nil }})
	out := logs.String()
	for _, w := range []string{`msg="OOM kill" pod=ml/p0 container=main pid=5001 command=hog`, `kind=container`, `attributed_by=record`,
		`msg="OOM kill" pod=ml/p1 container=main pid=6001 command=other`, `kind=limit cgroup="" kernel_time=3s attributed_by=counters`} {
		if !strings.Contains(out, w) {
			t.Errorf("the log has no %s:\n%s", w, out)
		}
	}
	if got := strings.Join(ev.got, ","); got != "ml/p0 main OOMKilling,ml/p1 main OOMKilling" {
		t.Errorf("events %s", got)
	}
	if a.Books.Reported != 1 || b.Books.Reported != 1 {
		t.Errorf("books told: A %+v, B %+v; want one kill each", a.Books, b.Books)
	}
	m.Forget("ml", "p0", "main")
	if n := testutil.CollectAndCount(m.kills); n != 1 {
		t.Errorf("%d kill series after A's were forgotten, want B's alone", n)
	}
}
