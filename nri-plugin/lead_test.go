package nriplugin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/oomkills"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/syncbuf"
)

// withRule is the shipped configuration with the init-as-pid1 rule's score
// and the plugin's index changed.
func withRule(t *testing.T, score, index string) string {
	s := readShipped(t)
	s = strings.Replace(s, "name = \"init-as-pid1\"\noom_score_adj = 900", "name = \"init-as-pid1\"\noom_score_adj = "+score, 1)
	s = strings.Replace(s, `plugin_index = "10"`, `plugin_index = "`+index+`"`, 1)
	if !strings.Contains(s, "oom_score_adj = "+score) {
		t.Fatal("the shipped configuration has no init-as-pid1 rule at 900")
	}
	return s
}

func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

// stop ends a test plugin's Run and waits for it.
func (tp *testPlugin) stop() { tp.cancel(); <-tp.done }

// A rollout with surge: the new pod's plugin connects while the old one
// runs, under the same name and index (NRI takes both). The old holds the
// node's lock, the new stands by; a container started meanwhile is at the
// rule (both write the same values: the same rules); the old leaving, the
// new takes the lock at once.
func TestTwoInstancesOneNameAndIndex(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{ctr}, 1)
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	old := connectPlugin(t, dir, readShipped(t), root)
	if err := rs.WaitSync(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	surge := connectPlugin(t, dir, readShipped(t), root)
	if err := rs.WaitSync(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if old.p.standby.Load() || !surge.p.standby.Load() {
		t.Fatalf("standby: old %v, new %v; want the old to hold the node's lock", old.p.standby.Load(), surge.p.standby.Load())
	}
	createAndStart(t, rs, pod, ctr)
	if score, group := onNode(t, root, ctr); score != "900" || group != "0" {
		t.Fatalf("started with score %s group %s, want 900 and 0", score, group)
	}
	// Both set it, the same values: the second finds them set (read,
	// compare, write), or writes what is there.
	for _, tp := range []*testPlugin{old, surge} {
		if l := tp.log(); !strings.Contains(l, "msg=decision pod=ml/pod-1 container=main rule=init-as-pid1 phase=start") || strings.Contains(l, "standby=true") {
			t.Fatalf("an instance did not set the container:\n%s", l)
		}
	}
	if n := testutil.ToFloat64(surge.p.m.lockHeld); n != 0 {
		t.Fatalf("the instance standing by says it holds the lock")
	}
	start := time.Now()
	old.stop()
	waitFor(t, "the new instance to take the node's lock", 2*time.Second, func() bool { return !surge.p.standby.Load() })
	t.Logf("the new instance took the lock %s after the old one stopped", time.Since(start).Round(time.Millisecond))
	if n := testutil.ToFloat64(surge.p.m.lockHeld); n != 1 {
		t.Fatalf("oomguard_node_lock_held %v after the takeover", n)
	}
	waitFor(t, "the takeover logged", time.Second, func() bool { return strings.Contains(surge.logs.String(), "took the node's lock") })
}

// A rollout that changes the rules: the instance standing by never writes
// other values than the holder's, whichever NRI calls first (indexes 05 and
// 20 around the holder's 10); when the holder leaves, the new instance takes
// the lock and sets every container to its own rule. The old instance,
// stopped, writes nothing after that.
func TestStandbyNeverOverridesTheHolder(t *testing.T) {
	for _, idx := range []string{"05", "20"} {
		t.Run("new instance at "+idx, func(t *testing.T) {
			pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
			ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
			root := fixtureNode(t, []*api.Container{ctr}, 2)
			dir := nriDir(t)
			rs := startRuntime(t, dir, nil, nil)
			old := connectPlugin(t, dir, withRule(t, "900", "10"), root)
			rs.WaitSync(20 * time.Second)
			surge := connectPlugin(t, dir, withRule(t, "700", idx), root)
			rs.WaitSync(20 * time.Second)
			createAndStart(t, rs, pod, ctr)
			if score, group := onNode(t, root, ctr); score != "900" || group != "0" {
				t.Fatalf("started with score %s group %s, want the holder's 900 and 0", score, group)
			}
			if !strings.Contains(surge.log(), "standby=true") {
				t.Fatalf("the new instance did not leave the container to the holder:\n%s", surge.log())
			}
			old.stop()
			// Every process of the container, not only its init.
			cg := filepath.Join(root, "sys/fs/cgroup", mustResolve(t, ctr.Linux.CgroupsPath))
			procs, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			waitFor(t, "the new instance's rule on the container's processes", 2*time.Second, func() bool {
				if _, group := onNode(t, root, ctr); group != "0" {
					return false
				}
				for _, pid := range strings.Fields(string(procs)) {
					if s, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj")); strings.TrimSpace(string(s)) != "700" {
						return false
					}
				}
				return true
			})
		})
	}
}

// An instance that holds no lock because none can be had (no writable
// /run) does everything, as before the lock.
func TestNoLockActsAlone(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "run"), []byte("not a directory"), 0o644)
	p := New(Options{Config: config.Default(), Root: root, Log: slog.New(slog.DiscardHandler)})
	if p.takeLock() || p.lock != nil || !p.mayWrite() {
		t.Fatal("without a lock the instance must act as the node's only one")
	}
}

// killRecords are OOM kills in the container at cgroup cg: each its
// oom-kill line (naming the cgroup) and its Killed process line, seq from
// first, a second apart from at (µs since boot).
func killRecords(cg string, first, at, n int) []string {
	var out []string
	for i := range n {
		seq, us := first+2*i, at+i*1_000_000
		out = append(out,
			fmt.Sprintf("6,%d,%d,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=%s,task_memcg=%s,task=hog%d,pid=%d,uid=0", seq, us, cg, cg, seq, 5000+seq),
			fmt.Sprintf("3,%d,%d,-;Memory cgroup out of memory: Killed process %d (hog%d) total-vm:1000kB, anon-rss:500kB, file-rss:20kB, shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:900", seq+1, us+100, 5000+seq, seq))
	}
	return out
}

// kmsgFrom is the kernel's log holding recs; it says whether it was
// opened at its oldest record (a reader taking over) or its end.
func kmsgFrom(recs []string, oldest *bool) func(bool) (oomkills.Source, error) {
	return func(o bool) (oomkills.Source, error) {
		*oldest = o
		f := &fakeKmsg{recs: recs, errs: make([]error, len(recs))}
		return f, nil
	}
}

// handoverNode is a node of one guarded container, its cgroup cg, and
// instance: a plugin that takes the node's lock, reads recs as the kernel's
// log at kernel time now until their end, and lets the lock go; it says
// whether it read from the log's oldest record.
func handoverNode(t *testing.T) (cg string, instance func(recs []string, now time.Duration) (*Plugin, *syncbuf.Buffer, bool)) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{ctr}, 1)
	os.MkdirAll(filepath.Join(root, "proc/sys/kernel/random"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"), []byte("b00t\n"), 0o644)
	return mustResolve(t, ctr.Linux.CgroupsPath), func(recs []string, now time.Duration) (*Plugin, *syncbuf.Buffer, bool) {
		logs := &syncbuf.Buffer{}
		p := New(Options{Config: config.Default(), Root: root, Log: slog.New(slog.NewTextHandler(logs, nil))})
		if p.takeLock() {
			t.Fatal("an instance alone must hold the node's lock")
		}
		if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, []*api.Container{ctr}); err != nil {
			t.Fatal(err)
		}
		p.waitBackground()
		var oldest bool
		p.watchKills(context.Background(), oomkills.Log{Open: kmsgFrom(recs, &oldest), Now: func() time.Duration { return now }})
		p.lock.close()
		return p, logs, oldest
	}
}

// The node's kill reporter handed over: the instance that takes the lock
// reads the kernel's log from the record after where its predecessor
// stopped (the position beside the lock), reports the kills logged while
// no instance read it (caught up) and those after, and none twice; the
// counters of both instances sum to the kills.
func TestKillsHandedOver(t *testing.T) {
	cg, instance := handoverNode(t)
	// Six kills: the old instance reads the first two; two come while no
	// instance reads the log; two after the new one took over.
	all := append([]string{"6,100,1000,-;boot"}, killRecords(cg, 101, 10_000_000, 6)...)
	old, oldLogs, oldest := instance(all[:1+4], 0) // the first two kills, then the old one stops
	if oldest {
		t.Fatal("the first instance on the node must read the log from its end")
	}
	// The new instance took the lock at 12.5 s: the third and fourth kills
	// (12 s, 13 s)... the third before, the rest after.
	now, newLogs, oldest := instance(all, 12_500_000*time.Microsecond)
	if !oldest {
		t.Fatal("the instance taking over must read the log from its oldest record")
	}
	count := func(p *Plugin) float64 {
		return killsOf(t, p.m, "ml", "pod-1", "main", oomkills.KillContainer)
	}
	if o, n := count(old), count(now); o != 2 || n != 4 {
		t.Fatalf("kills counted: old %v, new %v; want 2 and 4 (six in all, none twice)\nold:\n%s\nnew:\n%s", o, n, oldLogs, newLogs)
	}
	lines := strings.Count(newLogs.String(), `msg="OOM kill"`)
	caught := strings.Count(newLogs.String(), "caught_up=true")
	if lines != 4 || caught != 1 {
		t.Fatalf("the new instance logged %d kills, %d caught up on; want 4 and 1:\n%s", lines, caught, newLogs)
	}
	for _, comm := range []string{"hog101", "hog103"} {
		if strings.Contains(newLogs.String(), "command="+comm+" ") {
			t.Fatalf("the new instance reported %s again:\n%s", comm, newLogs)
		}
	}
	// The records after the position were overwritten: said, counted.
	_, lostLogs, _ := instance(all[9:], 20_000_000*time.Microsecond)
	if !strings.Contains(lostLogs.String(), "overwritten before this one read them") {
		t.Fatalf("a gap after the position was not said:\n%s", lostLogs)
	}
}

// A predecessor that read no record (a quiet node) leaves its start: the
// instance taking over reports what was logged after it, never the kills
// the log held from before the first instance started.
func TestHandoverAfterAQuietPredecessor(t *testing.T) {
	cg, instance := handoverNode(t)
	// Two kills an hour before the first instance, one after it started.
	all := append(killRecords(cg, 101, 1_000_000, 2), killRecords(cg, 105, 3_700_000_000, 1)...)
	instance(nil, 3_600*time.Second) // started an hour in; read nothing
	_, logs, _ := instance(all, 3_800*time.Second)
	if n := strings.Count(logs.String(), `msg="OOM kill"`); n != 1 || !strings.Contains(logs.String(), "command=hog105 ") {
		t.Fatalf("the successor reported %d kills, want hog105 alone (the others were before the first instance):\n%s", n, logs)
	}
	if strings.Contains(logs.String(), "overwritten") {
		t.Fatalf("a predecessor that read nothing lost nothing:\n%s", logs)
	}
}
