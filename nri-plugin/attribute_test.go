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
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/oomkills"
	"github.com/oomguard/oomguard/test/nriruntime"
)

// killed is a "Killed process" record alone, as the kernel writes it when
// its rate limit dropped the oom-kill record, or for a group's member; each
// process's memory is its own (its total-vm here).
func killed(seq, pid int, comm string) string {
	return fmt.Sprintf("3,%d,%d,-;Memory cgroup out of memory: Killed process %d (%s) total-vm:%dkB, anon-rss:500kB, file-rss:20kB, shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:900", seq, 1000+seq, pid, comm, pid)
}

// In a test's records: the kernel overwrote records unread here; no
// record was waiting here (the log read up to now).
const (
	lostRecords = "(lost)"
	quietLog    = "(quiet)"
)

// summary is an oom-kill record naming the cgroups as given.
func summary(seq int, oomMemcg, taskMemcg, comm string, pid int) string {
	return fmt.Sprintf("6,%d,%d,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=%s,task_memcg=%s,task=%s,pid=%d,uid=0", seq, 1000+seq, oomMemcg, taskMemcg, comm, pid)
}

// Every kill is attributed to the container it happened in, or reported
// unattributed with the containers it may have been in: never to another.
// The evidence is the kernel's (counters, the record read every way); the
// pod's is only what it names.
func TestKillAttribution(t *testing.T) {
	podA := nriruntime.KubeletPod("a", "ml", "guaranteed", "runc", nil)
	podB := nriruntime.KubeletPod("b", "ml", "guaranteed", "runc", nil)
	a := nriruntime.KubeletContainer(podA, "main", -997, "/sbin/init")
	b := nriruntime.KubeletContainer(podB, "main", -997, "/sbin/init")
	cgA, cgB := mustResolve(t, a.Linux.CgroupsPath), mustResolve(t, b.Linux.CgroupsPath)
	idB := b.GetId()
	for _, tc := range []struct {
		name string
		// records, and the kills the kernel counts in A, in B and outside
		// every pod before record i is read.
		records      []string
		kills        map[int][3]int
		want         []string // in the log, in order
		events       []string
		unattributed float64
		series       string // the kill counter's, when given
		// now, when given, is the log's clock (kmsg.Now) as the records are
		// read; and the log is never quiet for long enough (LostWait 1 ns).
		now time.Duration
		// threads are {pid, tid}: threads /proc still shows.
		threads [][2]int
		// goneA, when given, is the record before which A's cgroup is removed.
		goneA int
	}{
		{
			// memory.oom.group kills A's every process; within the second a
			// kill in B whose oom-kill record was rate-limited: B's, no member of A.
			name: "group kill in A, then B's kill without its record",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"),
				"6,3,1003,-;Tasks in " + cgA + " are going to be killed due to memory.oom.group set", killed(4, 5002, "init"), killed(5, 5001, "hog"),
				killed(6, 6001, "other")},
			kills: map[int][3]int{0: {3, 0, 0}, 5: {0, 1, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `pod=ml/pod-a container=main pid=5002 command=init`, `oom_group_member=true`,
				`pod=ml/pod-b container=main pid=6001 command=other oom_score_adj=900 rss_kb=520 kind=limit cgroup=""`, `attributed_by=counters`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-b main"},
		},
		{
			// A's member met again through its thread (its leader exited
			// meanwhile, the thread still in /proc), which the kernel counts:
			// no kill of its own, and B's kill after it is still B's.
			name: "group kill in A, a member again through its thread, then B's kill",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"),
				"6,3,1003,-;Tasks in " + cgA + " are going to be killed due to memory.oom.group set", killed(4, 5002, "init"), killed(5, 5001, "hog"),
				strings.Replace(killed(6, 5002, "init"), "5002 (init)", "5003 (init-gc)", 1), killed(7, 6001, "other")},
			threads: [][2]int{{5002, 5003}},
			kills:   map[int][3]int{0: {4, 0, 0}, 6: {0, 1, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `pod=ml/pod-a container=main pid=5002 command=init`, `oom_group_member=true`,
				`pod=ml/pod-b container=main pid=6001 command=other oom_score_adj=900 rss_kb=520 kind=limit cgroup=""`, `attributed_by=counters`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-b main"},
		},
		{
			// The same, the thread gone: no proven repeat, so a kill of its
			// own; A's count holds it, and says it is A's.
			name: "group kill in A, a member's figures again, gone",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"),
				"6,3,1003,-;Tasks in " + cgA + " are going to be killed due to memory.oom.group set", killed(4, 5002, "init"), killed(5, 5001, "hog"),
				strings.Replace(killed(6, 5002, "init"), "5002 (init)", "5003 (init-gc)", 1), killed(7, 6001, "other")},
			kills: map[int][3]int{0: {4, 0, 0}, 6: {0, 1, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `pod=ml/pod-a container=main pid=5002 command=init`, `oom_group_member=true`,
				`pod=ml/pod-a container=main pid=5003 command=init-gc`, `oom_group_member=true maybe_repeat_of=5002`,
				`pod=ml/pod-b container=main pid=6001 command=other oom_score_adj=900 rss_kb=520 kind=limit cgroup=""`, `attributed_by=counters`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-b main"},
		},
		{
			// Within the second of A's group kill, B's kill whose oom-kill
			// record the rate limit dropped, with the figures of A's member
			// and another name: B's, no repeat of A's member (the issue's
			// case: no report of its own, A's count raised, B's owing).
			name: "group kill in A, then B's kill with a member's figures",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"),
				"6,3,1003,-;Tasks in " + cgA + " are going to be killed due to memory.oom.group set", killed(4, 5002, "init"), killed(5, 5001, "hog"),
				strings.Replace(killed(6, 5002, "init"), "5002 (init)", "6001 (other)", 1), killed(7, 6002, "other")},
			kills: map[int][3]int{0: {3, 0, 0}, 5: {0, 1, 0}, 6: {0, 1, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `pod=ml/pod-a container=main pid=5002 command=init`, `oom_group_member=true`,
				`pod=ml/pod-b container=main pid=6001 command=other`, `attributed_by=counters`, `maybe_repeat_of=5002`,
				`pod=ml/pod-b container=main pid=6002 command=other`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-b main", "ml/pod-b main"},
		},
		{
			// The same, A's container gone by the time B's kill is read: its
			// count cannot say that the kill is no repeat of A's member.
			name: "group kill in A, then B's kill with a member's figures, A gone",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"),
				"6,3,1003,-;Tasks in " + cgA + " are going to be killed due to memory.oom.group set", killed(4, 5002, "init"), killed(5, 5001, "hog"),
				strings.Replace(killed(6, 5002, "init"), "5002 (init)", "6001 (other)", 1)},
			kills:        map[int][3]int{0: {3, 0, 0}, 5: {0, 1, 0}},
			goneA:        5,
			want:         []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `pid=6001 command=other`, `attributed=false candidates="ml/pod-b/main, ml/pod-a/main"`},
			events:       []string{"ml/pod-a main", "ml/pod-a main"},
			unattributed: 1,
		},
		{
			// B's kill in A's second was the victim of B's own group kill: its
			// repeat is B's, told once.
			name: "group kill in A, then B's group kill without its record",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"),
				"6,3,1003,-;Tasks in " + cgA + " are going to be killed due to memory.oom.group set", killed(4, 5002, "init"), killed(5, 5001, "hog"),
				killed(6, 6001, "other"), "6,7,1007,-;Tasks in " + cgB + " are going to be killed due to memory.oom.group set",
				killed(8, 6002, "other-w"), killed(9, 6001, "other"), killed(10, 6003, "x")},
			kills: map[int][3]int{0: {3, 0, 0}, 5: {0, 3, 0}, 9: {0, 1, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `pod=ml/pod-a container=main pid=5002 command=init`,
				`pod=ml/pod-b container=main pid=6001 command=other`, `pod=ml/pod-b container=main pid=6002 command=other-w oom_score_adj=900 rss_kb=520 kind=limit`,
				`oom_group_member=true`, `pod=ml/pod-b container=main pid=6003 command=x`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-b main", "ml/pod-b main", "ml/pod-b main"},
		},
		{
			// The same, read late: B's kill was counted before A's member
			// was read; either line could be either's.
			name: "group kill in A and B's kill, read late",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"),
				"6,3,1003,-;Tasks in " + cgA + " are going to be killed due to memory.oom.group set", killed(4, 5002, "init"), killed(5, 5001, "hog"),
				killed(6, 6001, "other")},
			kills: map[int][3]int{0: {3, 1, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `pid=5002 command=init`, `oom_group_of=` + cgA, `attributed=false candidates="ml/pod-a/main, ml/pod-b/main"`,
				`pid=6001 command=other`, `attributed=false candidates="ml/pod-a/main, ml/pod-b/main"`},
			events:       []string{"ml/pod-a main"},
			unattributed: 2,
		},
		{
			// Two containers counted kills their records do not name: a bare
			// record could be either's, and so could the next.
			name:    "two containers with unreported kills",
			records: []string{killed(1, 5001, "x"), killed(2, 6001, "y")},
			kills:   map[int][3]int{0: {1, 1, 0}},
			want: []string{`pid=5001 command=x oom_score_adj=900 rss_kb=520 kind=limit cgroup=""`,
				`attributed=false candidates="ml/pod-a/main, ml/pod-b/main"`, `pid=6001 command=y`, `attributed=false candidates="ml/pod-a/main, ml/pod-b/main"`},
			unattributed: 2,
		},
		{
			// A child cgroup of A named after B's ID, or as B's scope.
			name: "a child of A named after B",
			records: []string{summary(1, cgA, cgA+"/"+idB, "hog", 5001), killed(2, 5001, "hog"),
				summary(3, cgA, cgA+"/cri-containerd-"+idB+".scope", "hog", 5002), killed(4, 5002, "hog")},
			kills:  map[int][3]int{0: {2, 0, 0}},
			want:   []string{`pod=ml/pod-a container=main pid=5001`, `attributed_by=record`, `pod=ml/pod-a container=main pid=5002`},
			events: []string{"ml/pod-a main", "ml/pod-a main"},
		},
		{
			// A child of A named so that the record reads as B's.
			name:    "a child of A naming a field",
			records: []string{summary(1, cgA, cgA+"/x,task_memcg="+cgB, "hog", 5001), killed(2, 5001, "hog")},
			kills:   map[int][3]int{0: {1, 0, 0}},
			want:    []string{`pod=ml/pod-a container=main pid=5001`},
			events:  []string{"ml/pod-a main"},
		},
		{
			// The kernel cut the record at 1 KiB (long cgroup names): the
			// counters tell.
			name:    "a record cut at 1 KiB",
			records: []string{fmt.Sprintf("6,1,1001,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=%s,task_memcg=%s/%s", cgA, cgA, strings.Repeat("n", 900)), killed(2, 5001, "hog")},
			kills:   map[int][3]int{0: {1, 0, 0}},
			want:    []string{`pod=ml/pod-a container=main pid=5001 command=hog`, `attributed_by=counters`},
			events:  []string{"ml/pod-a main"},
		},
		{
			// Records overwritten before they were read: once the log is
			// read up to now, each container's count beyond the kills told
			// there is its kills lost, and the node's count the rest.
			name: "records overwritten, told by container",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"), lostRecords,
				summary(20, cgA, cgA, "hog", 5010), killed(21, 5010, "hog"), quietLog, quietLog, summary(30, cgB, cgB, "x", 6001), killed(31, 6001, "x")},
			kills: map[int][3]int{0: {1, 0, 0}, 2: {4, 2, 1}, 7: {0, 1, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001`, `pod=ml/pod-a container=main pid=5010`,
				`msg="OOM kills whose kernel records were overwritten before oomguard read them" pod=ml/pod-a container=main kills=3 kind=unknown`,
				`msg="OOM kills whose kernel records were overwritten before oomguard read them" pod=ml/pod-b container=main kills=2 kind=unknown`,
				`msg="OOM kills whose kernel records were overwritten before oomguard read them" kills=1 kind=unknown outside_every_pod=true`,
				`pod=ml/pod-b container=main pid=6001`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-b main", "ml/pod-b main", "ml/pod-b main"},
			series: "///unknown=1 ml/pod-a/main/container=2 ml/pod-b/main/container=1 ml/pod-a/main/unknown=3 ml/pod-b/main/unknown=2",
		},
		{
			// A kill counted as the log went quiet, logged as the counts
			// were read: told as itself, not among the kills lost.
			name: "records overwritten, a kill logged as the counts were read",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"), lostRecords,
				quietLog, summary(20, cgA, cgA, "hog", 5010), killed(21, 5010, "hog"), quietLog, quietLog},
			kills: map[int][3]int{0: {1, 0, 0}, 2: {3, 0, 0}, 3: {1, 0, 0}},
			want: []string{`pod=ml/pod-a container=main pid=5001`, `pod=ml/pod-a container=main pid=5010`,
				`pod=ml/pod-a container=main kills=3 kind=unknown`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-a main"},
			series: "ml/pod-a/main/container=2 ml/pod-a/main/unknown=3",
		},
		{
			// The same, the log never quiet: the kills lost are told once a
			// record read is one just logged (B's 6001 after A's 5010).
			name: "records overwritten, the log never quiet",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"), lostRecords,
				summary(20, cgA, cgA, "hog", 5010), killed(21, 5010, "hog"), summary(30, cgB, cgB, "x", 6001), killed(31, 6001, "x")},
			kills: map[int][3]int{0: {1, 0, 0}, 2: {4, 2, 1}, 5: {0, 1, 0}},
			now:   1021*time.Microsecond + 50*time.Millisecond - time.Microsecond, // killed(21) is just logged (in oomkills' lostQuiet, 50 ms), summary(20) not
			want: []string{`pod=ml/pod-a container=main pid=5001`, `pod=ml/pod-a container=main pid=5010`,
				`pod=ml/pod-a container=main kills=3 kind=unknown`, `pod=ml/pod-b container=main kills=2 kind=unknown`, `kills=1 kind=unknown outside_every_pod=true`,
				`pod=ml/pod-b container=main pid=6001`},
			events: []string{"ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-a main", "ml/pod-b main", "ml/pod-b main", "ml/pod-b main"},
		},
		{
			// A kill told without its container (either could owe it): the
			// containers' counts no longer tell the lost ones apart.
			name:    "records overwritten after a kill told without its container",
			records: []string{summary(1, cgA, cgA, "hog", 5001), killed(2, 5001, "hog"), lostRecords, killed(20, 5010, "hog"), quietLog, quietLog},
			kills:   map[int][3]int{0: {1, 0, 0}, 2: {4, 2, 1}},
			want: []string{`pod=ml/pod-a container=main pid=5001`, `pid=5010 command=hog`, `attributed=false candidates="ml/pod-a/main, ml/pod-b/main, //(a process outside every pod)"`,
				`kills=6 kind=unknown attributed=false candidates="ml/pod-a/main, ml/pod-b/main, //(a process outside every pod)"`},
			events:       []string{"ml/pod-a main"},
			unattributed: 7,
		},
		{
			// A kill the node counted and no container did: outside every pod.
			name:    "a kill outside every pod",
			records: []string{killed(1, 7001, "daemon")},
			kills:   map[int][3]int{0: {0, 0, 1}},
			want:    []string{`pid=7001 command=daemon oom_score_adj=900 rss_kb=520 kind=limit cgroup=""`, `attributed_by=counters`, `node_daemon=false`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fixtureNode(t, []*api.Container{a, b}, 1)
			events := filepath.Join(root, "sys/fs/cgroup", cgA, "memory.events")
			eventsB := filepath.Join(root, "sys/fs/cgroup", cgB, "memory.events")
			count := ctrKills
			vmstat := func(n int) { nodeKills(root, n) }
			count(events, 0) // new cgroups count no kill
			count(eventsB, 0)
			vmstat(100)
			cfg, err := config.Parse([]byte(readShipped(t)))
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			rec := &fakeRecorder{}
			p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics(), Events: rec})
			var l oomkills.Log
			if tc.now != 0 {
				l.Now, l.LostWait = func() time.Duration { return tc.now }, time.Nanosecond
			}
			startAll(t, p, []*api.PodSandbox{podA, podB}, []*api.Container{a, b})
			for _, th := range tc.threads {
				os.MkdirAll(filepath.Join(root, "proc", fmt.Sprint(th[0]), "task", fmt.Sprint(th[1])), 0o755)
			}
			var inA, inB, all int
			before := map[int]func(){}
			for i, k := range tc.kills {
				before[i] = func() {
					inA, inB, all = inA+k[0], inB+k[1], all+k[0]+k[1]+k[2]
					count(events, inA)
					count(eventsB, inB)
					vmstat(100 + all)
					if tc.goneA != 0 && i == tc.goneA {
						os.RemoveAll(filepath.Dir(events))
					}
				}
			}
			if tc.goneA != 0 && before[tc.goneA] == nil {
				t.Fatal("goneA must be a record before which kills are counted")
			}
			errs := make([]error, len(tc.records))
			for i, r := range tc.records {
				errs[i] = map[string]error{lostRecords: kmsg.ErrLost, quietLog: os.ErrDeadlineExceeded}[r]
			}
			l.Open = from(&fakeKmsg{recs: tc.records, errs: errs, before: before})
			p.watchKills(context.Background(), l)
			out := logs.String()
			at := 0
			for _, w := range tc.want {
				i := strings.Index(out[at:], w)
				if i < 0 {
					t.Fatalf("the log has no %s after what came before:\n%s", w, out)
				}
				at += i
			}
			var got []string
			for _, e := range rec.got {
				got = append(got, strings.Join(strings.Fields(e)[:2], " "))
			}
			if strings.Join(got, ",") != strings.Join(tc.events, ",") {
				t.Errorf("events on %q, want %q", got, tc.events)
			}
			if n := counted(t, p.m, "oomguard_oom_kills_unattributed_total"); n != tc.unattributed {
				t.Errorf("unattributed kills %v, want %v", n, tc.unattributed)
			}
			if got := killSeries(t, p.m); tc.series != "" && got != tc.series {
				t.Errorf("kill series %s, want %s", got, tc.series)
			}
		})
	}
}

// The kernel tells of a changed memory.events at most once in 10 ms: a
// kill read at once must still find its own container, whose count the
// kernel has raised but not yet told of, and not settle on another that
// merely owes.
func TestKillToldLate(t *testing.T) {
	podA, podB, a, b, root, count := twoGuarded(t)
	vmstat := func(n int) { nodeKills(root, n) }
	count(a, 0)
	count(b, 0)
	vmstat(100)
	var logs bytes.Buffer
	p := New(Options{Config: config.Default(), Root: root, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics()})
	startAll(t, p, []*api.PodSandbox{podA, podB}, []*api.Container{a, b})
	count(b, 1) // B owes a kill whose record went unread
	rec := killed(1, 5001, "hog")
	src := &fakeKmsg{recs: []string{rec}, errs: make([]error, 1), before: map[int]func(){0: func() {
		vmstat(102)
		go func() { time.Sleep(5 * time.Millisecond); count(a, 1) }() // A's own kill, told late
	}}}
	// The record is read as it is written.
	p.watchKills(context.Background(), oomkills.Log{Open: from(src), Now: func() time.Duration { return 1001 * time.Microsecond }})
	out := logs.String()
	if !strings.Contains(out, "pid=5001") || !(strings.Contains(out, "pod=ml/pod-a ") || strings.Contains(out, `candidates="ml/pod-a/main, ml/pod-b/main"`)) {
		t.Fatalf("a kill in A told late must be A's, or unsure with A among its candidates:\n%s", out)
	}
}

// The runtime drops a plugin it waited on too long and takes it back
// (Synchronize again): the books of the kills stay, so that a kill counted
// before, whose record is read after, is still its container's.
func TestResyncKeepsTheBooks(t *testing.T) {
	podA, podB, a, b, root, count := twoGuarded(t)
	count(a, 0)
	count(b, 0)
	nodeKills(root, 100)
	var logs bytes.Buffer
	p := New(Options{Config: config.Default(), Root: root, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics()})
	pods, ctrs := []*api.PodSandbox{podA, podB}, []*api.Container{a, b}
	startAll(t, p, pods, ctrs)
	count(a, 1) // a kill in A, its record not read yet
	if _, err := p.Synchronize(context.Background(), pods, ctrs); err != nil {
		t.Fatal(err)
	}
	p.waitBackground()
	src := &fakeKmsg{recs: []string{killed(1, 5001, "hog")}, errs: make([]error, 1)}
	p.watchKills(context.Background(), oomkills.Log{Open: from(src)})
	if out := logs.String(); !strings.Contains(out, "pod=ml/pod-a container=main pid=5001") {
		t.Fatalf("a kill counted in A before the runtime took the plugin back, read after, must be A's:\n%s", out)
	}
}

// Kills told without their container stay in the count of the container
// they were in; once no container they may have been in counts kills (its
// cgroup gone as it stopped, the runtime's removal told later, or told),
// no count the plugin reads holds them. They must not then make every
// later kill "maybe outside every pod", nor keep kills whose records were
// lost from being told by container (the VM: a burst's unsure kills, its
// pods deleted, then another pod's kills).
func TestRemovedContainersLeaveNoKillsOwing(t *testing.T) {
	for _, removed := range []bool{false, true} {
		t.Run(map[bool]string{false: "stopped", true: "removed"}[removed], func(t *testing.T) { removedContainers(t, removed) })
	}
}

func removedContainers(t *testing.T, removed bool) {
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for _, n := range []string{"a", "b", "c"} {
		pod := nriruntime.KubeletPod(n, "ml", "guaranteed", "runc", nil)
		pods, ctrs = append(pods, pod), append(ctrs, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	}
	root := fixtureNode(t, ctrs, 1)
	cg := func(i int) string {
		return filepath.Join(root, "sys/fs/cgroup", mustResolve(t, ctrs[i].Linux.CgroupsPath))
	}
	count := func(i, n int) { ctrKills(filepath.Join(cg(i), "memory.events"), n) }
	vmstat := func(n int) { nodeKills(root, n) }
	for i := range ctrs {
		count(i, 0)
	}
	vmstat(100)
	var logs bytes.Buffer
	p := New(Options{Config: config.Default(), Root: root, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics()})
	startAll(t, p, pods, ctrs)
	src := &fakeKmsg{
		recs: []string{killed(1, 5001, "x"), killed(2, 6001, "y"), killed(3, 7001, "z"), lostRecords, quietLog, quietLog},
		errs: []error{nil, nil, nil, kmsg.ErrLost, os.ErrDeadlineExceeded, os.ErrDeadlineExceeded},
		before: map[int]func(){
			0: func() { count(0, 1); count(1, 1); vmstat(102) }, // A's and B's: either record could be either's
			2: func() {
				for i := range 2 {
					os.RemoveAll(cg(i))
					if !removed {
						continue
					}
					if err := p.RemoveContainer(context.Background(), pods[i], ctrs[i]); err != nil {
						t.Error(err)
					}
				}
				count(2, 1)
				vmstat(103)
			},
			3: func() { count(2, 3); vmstat(105) }, // two of C's kills whose records were overwritten
		},
	}
	p.watchKills(context.Background(), oomkills.Log{Open: from(src)})
	out := logs.String()
	for _, w := range []string{
		`pid=5001 command=x`, `attributed=false candidates="ml/pod-a/main, ml/pod-b/main"`,
		`pod=ml/pod-c container=main pid=7001 command=z`,
		`msg="OOM kills whose kernel records were overwritten before oomguard read them" pod=ml/pod-c container=main kills=2 kind=unknown`,
	} {
		if !strings.Contains(out, w) {
			t.Fatalf("the log has no %s:\n%s", w, out)
		}
	}
}

// nodeKills sets the node's count of OOM kills (/proc/vmstat).
func nodeKills(root string, n int) {
	os.WriteFile(filepath.Join(root, "proc/vmstat"), fmt.Appendf(nil, "oom_kill %d\n", n), 0o644)
}

// ctrKills sets a container's count of OOM kills (its memory.events).
func ctrKills(events string, n int) {
	os.WriteFile(events, fmt.Appendf(nil, "oom %d\noom_kill %d\n", n, n), 0o644)
}

// twoGuarded is a node of two pods, each with a guarded container, and how
// to set a container's memory.events count of kills.
func twoGuarded(t *testing.T) (podA, podB *api.PodSandbox, a, b *api.Container, root string, count func(*api.Container, int)) {
	podA = nriruntime.KubeletPod("a", "ml", "guaranteed", "runc", nil)
	podB = nriruntime.KubeletPod("b", "ml", "guaranteed", "runc", nil)
	a = nriruntime.KubeletContainer(podA, "main", -997, "/sbin/init")
	b = nriruntime.KubeletContainer(podB, "main", -997, "/sbin/init")
	root = fixtureNode(t, []*api.Container{a, b}, 1)
	count = func(c *api.Container, n int) {
		ctrKills(filepath.Join(root, "sys/fs/cgroup", mustResolve(t, c.Linux.CgroupsPath), "memory.events"), n)
	}
	return podA, podB, a, b, root, count
}

// startAll starts ctrs[i] of pods[i] through the plugin, as the runtime does.
func startAll(t *testing.T, p *Plugin, pods []*api.PodSandbox, ctrs []*api.Container) {
	t.Helper()
	for i, c := range ctrs {
		if err := p.StartContainer(context.Background(), pods[i], c); err != nil {
			t.Fatal(err)
		}
	}
	p.waitBackground()
}
