package nriplugin

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/oomkills"
	"github.com/oomguard/oomguard/test/nriruntime"
)

// v1Node is a node whose memory controller is on cgroup v1, running a
// guarded container in each of pods a and b, and the plugin.
type v1Node struct {
	root     string
	pods     []*api.PodSandbox
	ctrs     []*api.Container
	cgA, cgB string
	logs     bytes.Buffer
	p        *Plugin
}

func newV1Node(t *testing.T) *v1Node {
	t.Helper()
	n := &v1Node{root: t.TempDir()}
	write := func(p, c string) {
		os.MkdirAll(filepath.Dir(filepath.Join(n.root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(n.root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/fs/cgroup/unified/cgroup.controllers", "")
	for i, name := range []string{"a", "b"} {
		pod := nriruntime.KubeletPod(name, "ml", "guaranteed", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
		n.pods, n.ctrs = append(n.pods, pod), append(n.ctrs, ctr)
		cg := mustResolve(t, ctr.Linux.CgroupsPath)
		pid := fmt.Sprint(2000 + i)
		write("sys/fs/cgroup/memory"+cg+"/cgroup.procs", pid+"\n")
		write("proc/"+pid+"/cgroup", "12:memory:"+cg+"\n0::"+cg+"\n")
		write("proc/"+pid+"/oom_score_adj", "-997\n")
	}
	n.cgA, n.cgB = mustResolve(t, n.ctrs[0].Linux.CgroupsPath), mustResolve(t, n.ctrs[1].Linux.CgroupsPath)
	n.in(n.cgA, "", 0)
	n.in(n.cgB, "", 0)
	n.count(100)
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	n.p = New(Options{Config: cfg, Root: n.root, Log: slog.New(slog.NewTextHandler(&n.logs, nil)), Metrics: NewMetrics()})
	startAll(t, n.p, n.pods, n.ctrs)
	return n
}

// in sets cgroup sub's own count of kills below cg, making it.
func (n *v1Node) in(cg, sub string, kills int) {
	dir := filepath.Join(n.root, "sys/fs/cgroup/memory", cg+sub)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "memory.oom_control"), fmt.Appendf(nil, "oom_kill_disable 0\nunder_oom 0\noom_kill %d\n", kills), 0o644)
}

// gone removes cgroup sub below cg, as systemd removes a unit's.
func (n *v1Node) gone(cg, sub string) {
	os.RemoveAll(filepath.Join(n.root, "sys/fs/cgroup/memory", cg+sub))
}

// count sets the node's count of kills.
func (n *v1Node) count(kills int) { nodeKills(n.root, kills) }

// read has the plugin read records, before[i] run before the i-th; its log.
func (n *v1Node) read(t *testing.T, recs []string, before map[int]func()) string {
	t.Helper()
	src := &fakeKmsg{recs: recs, errs: make([]error, len(recs)), before: before}
	n.p.watchKills(context.Background(), oomkills.Log{Open: from(src)})
	return n.logs.String()
}

// On cgroup v1 a container's count is the sum of its cgroups' own: a unit
// cgroup removed (systemd in a VM-like pod) takes its kills out of it. The
// books keep them: the kills after it are still the container's, never
// "outside every pod" (the real kernel: 3 of a burst of 200, after three
// children were removed).
func TestV1KillsOfRemovedCgroupsStayInTheBooks(t *testing.T) {
	n := newV1Node(t)
	for _, u := range []string{"/u1.service", "/u2.service", "/u3.service"} {
		n.in(n.cgA, u, 0)
	}
	var recs []string
	before := map[int]func(){}
	for i, u := range []string{"/u1.service", "/u2.service", "/u3.service"} { // a kill in each unit, named by its record
		before[len(recs)] = func() { n.in(n.cgA, u, 1); n.count(101 + i) }
		recs = append(recs, summary(2*i+1, n.cgA, n.cgA+u, "hog", 5001+i), killed(2*i+2, 5001+i, "hog"))
	}
	before[len(recs)] = func() { // the units stopped: their cgroups removed
		for _, u := range []string{"/u1.service", "/u2.service", "/u3.service"} {
			n.gone(n.cgA, u)
		}
		n.in(n.cgA, "", 1)
		n.count(104)
	}
	for i := range 3 { // a burst whose oom-kill records the rate limit dropped
		if i > 0 {
			before[len(recs)] = func() { n.in(n.cgA, "", 1+i); n.count(104 + i) }
		}
		recs = append(recs, strings.Replace(killed(10+i, 5101+i, "hog"), fmt.Sprintf(",%d,", 1010+i), fmt.Sprintf(",%d,", 3000000+i), 1))
	}
	out := n.read(t, recs, before)
	for i := range 3 {
		if w := fmt.Sprintf("pod=ml/pod-a container=main pid=%d command=hog", 5101+i); !strings.Contains(out, w) {
			t.Errorf("the log has no %s:\n%s", w, out)
		}
	}
	if strings.Contains(out, "node_daemon=") || strings.Contains(out, "attributed=false") {
		t.Errorf("a kill in A reported outside every pod, or unsure:\n%s", out)
	}
}

// A unit's cgroup removed with a kill no read of it saw (its record the
// rate limit dropped): the container's count cannot say that kill was not
// its, so it is told unsure with it among the candidates, never outside
// every pod for certain; once every kill is read, the books start again
// at the count, and B's kill after it is B's.
func TestV1KillInARemovedCgroupUnsure(t *testing.T) {
	n := newV1Node(t)
	n.in(n.cgA, "/u1.service", 0)
	recs := []string{summary(1, n.cgA, n.cgA, "init", 5001), killed(2, 5001, "init"),
		strings.Replace(killed(3, 5002, "hog"), ",1003,", ",3000000,", 1),
		strings.Replace(killed(4, 6001, "other"), ",1004,", ",3000001,", 1)}
	out := n.read(t, recs, map[int]func(){
		0: func() { n.in(n.cgA, "", 1); n.count(101) },
		2: func() { n.in(n.cgA, "/u1.service", 1); n.count(102); n.gone(n.cgA, "/u1.service") },
		3: func() { n.in(n.cgB, "", 1); n.count(103) },
	})
	for _, w := range []string{`pod=ml/pod-a container=main pid=5001`,
		`pid=5002 command=hog`, `attributed=false candidates="ml/pod-a/main, //(a process outside every pod)"`,
		`pod=ml/pod-b container=main pid=6001 command=other`} {
		if !strings.Contains(out, w) {
			t.Errorf("the log has no %s:\n%s", w, out)
		}
	}
	if strings.Contains(out, "node_daemon=") {
		t.Errorf("a kill that may be A's reported outside every pod:\n%s", out)
	}
}

// A kill told in a unit's cgroup that was removed before any read saw it:
// the books keep it, and the kill after it in the container is its.
func TestV1KillToldInACgroupNeverRead(t *testing.T) {
	n := newV1Node(t)
	recs := []string{summary(1, n.cgA, n.cgA+"/u9.service", "hog", 5001), killed(2, 5001, "hog"),
		strings.Replace(killed(3, 5002, "hog"), ",1003,", ",3000000,", 1),
		strings.Replace(killed(4, 5003, "hog"), ",1004,", ",3000001,", 1)}
	out := n.read(t, recs, map[int]func(){
		0: func() { n.in(n.cgA, "/u9.service", 1); n.count(101) },
		1: func() { n.gone(n.cgA, "/u9.service") }, // before the plugin reads A
		2: func() { n.in(n.cgA, "", 1); n.count(102) },
		3: func() { n.in(n.cgA, "", 2); n.count(103) },
	})
	for _, w := range []string{`pod=ml/pod-a container=main pid=5001`, `pid=5002 command=hog`, `pod=ml/pod-a container=main pid=5003 command=hog`} {
		if !strings.Contains(out, w) {
			t.Errorf("the log has no %s:\n%s", w, out)
		}
	}
	if strings.Contains(out, "node_daemon=") {
		t.Errorf("a kill that may be A's reported outside every pod:\n%s", out)
	}
}

// Records overwritten unread while a unit's cgroup that held a kill was
// removed: the kills lost are told by number with the container among the
// candidates, never as outside every pod for certain.
func TestV1KillsLostWithARemovedCgroup(t *testing.T) {
	n := newV1Node(t)
	n.in(n.cgA, "/u1.service", 0)
	recs := []string{summary(1, n.cgA, n.cgA, "init", 5001), killed(2, 5001, "init"), lostRecords, quietLog, quietLog}
	src := &fakeKmsg{recs: recs, errs: []error{nil, nil, kmsg.ErrLost, os.ErrDeadlineExceeded, os.ErrDeadlineExceeded}, before: map[int]func(){
		0: func() { n.in(n.cgA, "", 1); n.count(101) },
		2: func() { n.in(n.cgA, "/u1.service", 1); n.count(102); n.gone(n.cgA, "/u1.service") },
	}}
	n.p.watchKills(context.Background(), oomkills.Log{Open: from(src)})
	out := n.logs.String()
	if w := `kills=1 kind=unknown attributed=false candidates="ml/pod-a/main, //(a process outside every pod)"`; !strings.Contains(out, w) || strings.Contains(out, "outside_every_pod=true") {
		t.Errorf("the log has no %s, or has the kill outside every pod:\n%s", w, out)
	}
}
