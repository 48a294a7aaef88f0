package nriplugin

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/execwatch"
	"github.com/oomguard/oomguard/test/nriruntime"
)

func noExecs() (execSource, error) { return nil, errors.New("not in tests") }

// fakeExecs hands out batches of events, then ends.
type fakeExecs struct {
	batches [][]execwatch.Event
	errs    []error
}

func (f *fakeExecs) Read(evs []execwatch.Event) ([]execwatch.Event, error) {
	if len(f.batches) == 0 {
		return evs, errors.New("closed")
	}
	b, err := f.batches[0], f.errs[0]
	f.batches, f.errs = f.batches[1:], f.errs[1:]
	return append(evs, b...), err
}

func execs(pids ...int) []execwatch.Event {
	var evs []execwatch.Event
	for _, p := range pids {
		evs = append(evs, execwatch.Event{Pid: p})
	}
	return evs
}
func (f *fakeExecs) Close() error { return nil }

// A process exec'd into a guarded container starts at its spec's score
// (kubelet's): it is set to the rule's when it execs, and only there.
func TestExecdProcessSet(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	other := nriruntime.KubeletContainer(pod, "sidecar", -997, "/app")
	root := fixtureNode(t, []*api.Container{guarded, other}, 1) // 1001 in main, 1002 in sidecar
	cg := mustResolve(t, guarded.Linux.CgroupsPath)
	// 1003 exec'd into main (below it, as in a systemd's child cgroup), 1004
	// on the host; 1005 exec'd into main among the events the kernel dropped.
	for pid, c := range map[string]string{"1003": cg + "/init.scope", "1004": "/system.slice/sshd.service", "1005": cg} {
		fakeProc(root, pid, c, "-997")
	}
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	for _, c := range []*api.Container{guarded, other} {
		if err := p.StartContainer(context.Background(), pod, c); err != nil {
			t.Fatal(err)
		}
	}
	p.waitBackground() // the runtime has the replies: the containers can start
	procs := filepath.Join(root, "sys/fs/cgroup", cg, "cgroup.procs")
	b, _ := os.ReadFile(procs)
	os.WriteFile(procs, append(b, "1005\n"...), 0o644)
	src := &fakeExecs{batches: [][]execwatch.Event{execs(1003, 1004, 99999), execs(1002)}, errs: []error{nil, execwatch.ErrLost}}
	p.watchExecs(context.Background(), func() (execSource, error) { return src, nil })
	p.waitBackground()
	for pid, want := range map[string]string{"1003": "900\n", "1004": "-997\n", "1002": "-997\n", "1005": "900\n"} {
		if b, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj")); string(b) != want {
			t.Errorf("pid %s: %q, want %q", pid, b, want)
		}
	}
	if n := counted(t, p.m, "oomguard_exec_events_lost_total"); n != 1 {
		t.Errorf("lost events counted %v, want 1", n)
	}
}

// An exec'd process forks before oomguard sets it (sh -c 'a & b'): its
// children took the spec's score, and are set as their forks are seen,
// down the tree; forks of processes oomguard did not just set are left.
func TestForkOfExecdProcessSet(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{guarded}, 1) // 1001 in main
	cg := mustResolve(t, guarded.Linux.CgroupsPath)
	procs := map[string]string{"1003": "-997", "1005": "-997", "1006": "-997", "1007": "900", "1008": "-997", "1009": "-997"}
	for pid, score := range procs {
		fakeProc(root, pid, cg, score)
	}
	p := startedWith(t, root, pod, guarded)
	src := &fakeExecs{batches: [][]execwatch.Event{
		// 1003 exec'd (set), forked 1005 (set), which forked 1006 (set);
		// 1007 exec'd at 900 already: its child 1008 inherited 900 in life.
		{{Pid: 1003}, {Pid: 1005, Parent: 1003}, {Pid: 1006, Parent: 1005}, {Pid: 1007}, {Pid: 1008, Parent: 1007}},
		{{Pid: 1009, Parent: 1001}}, // the init's own fork: not oomguard's to follow
	}, errs: []error{nil, nil}}
	p.watchExecs(context.Background(), func() (execSource, error) { return src, nil })
	for pid, want := range map[string]string{"1003": "900\n", "1005": "900\n", "1006": "900\n", "1007": "900\n", "1008": "-997\n", "1009": "-997\n"} {
		if b, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj")); string(b) != want {
			t.Errorf("pid %s: %q, want %q", pid, b, want)
		}
	}
}

// Forks are followed whatever the exec'd process does: gone before its
// exec was read (a daemon's first fork exits at once), its children say
// where they run; a child cloned with CLONE_PARENT names the exec'd
// process's parent, whose forks are then set where they run in the
// container, and only there.
func TestForksFollowedWhateverTheExecdProcessDoes(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{guarded}, 1) // 1001 in main
	cg := mustResolve(t, guarded.Linux.CgroupsPath)
	procs := map[string]string{"1003": cg, "1010": cg, "1011": "/system.slice/containerd.service", "1021": cg, "1022": cg}
	for pid, c := range procs {
		fakeProc(root, pid, c, "-997")
	}
	// 1003's parent is the runtime's shim, 500, outside the container.
	os.WriteFile(filepath.Join(root, "proc", "1003", "stat"), []byte("1003 (sh) S 500 1003 1003 0 -1 4194560 0 0 0 0\n"), 0o644)
	// 1030 cloned 1031 with CLONE_PARENT and exited: a zombie of 600's, its /proc at the root cgroup.
	for pid, c := range map[string]string{"1030": "/", "1031": cg, "1041": cg} {
		fakeProc(root, pid, c, "-997")
	}
	os.WriteFile(filepath.Join(root, "proc", "1030", "stat"), []byte("1030 (forker) Z 600 1030 1030 0 -1 4194560 0 0 0 0\n"), 0o644)
	p := startedWith(t, root, pod, guarded)
	src := &fakeExecs{batches: [][]execwatch.Event{
		// 1003 exec'd and cloned 1010 with CLONE_PARENT: the event names 500;
		// 500's other child, 1011, runs on the host.
		{{Pid: 1003}, {Pid: 1010, Parent: 500}, {Pid: 1011, Parent: 500}},
		// 1020 exec'd, forked 1021 and exited before its exec was read;
		// 1021 forked 1022 before it was set.
		{{Pid: 1020}, {Pid: 1021, Parent: 1020}, {Pid: 1022, Parent: 1021}},
		{{Pid: 1030}, {Pid: 1031, Parent: 600}},
		// 700 forked 1040, which exec'd, cloned 1041 with CLONE_PARENT and
		// was reaped before its exec was read.
		{{Pid: 1040, Parent: 700}, {Pid: 1040}, {Pid: 1041, Parent: 700}},
	}, errs: []error{nil, nil, nil, nil}}
	p.watchExecs(context.Background(), func() (execSource, error) { return src, nil })
	for pid, want := range map[string]string{"1003": "900\n", "1010": "900\n", "1011": "-997\n", "1021": "900\n", "1022": "900\n", "1031": "900\n", "1041": "900\n"} {
		if b, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj")); string(b) != want {
			t.Errorf("pid %s: %q, want %q", pid, b, want)
		}
	}
}

// What an exec'd process forked before it was set is set shortly after,
// whatever parent the fork events named: here one outside every followed
// process (the runtime's shim, once runc exec had exited and the exec'd
// process was reparented to it), and one whose event the kernel never
// sent. The exec'd process's container is walked once more.
func TestForksNoEventNamedSwept(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{guarded}, 1) // 1001 in main
	cg := mustResolve(t, guarded.Linux.CgroupsPath)
	for _, pid := range []string{"1003", "1050", "1051"} {
		fakeProc(root, pid, cg, "-997")
	}
	p := startedWith(t, root, pod, guarded)
	procs := filepath.Join(root, "sys/fs/cgroup", cg, "cgroup.procs")
	b, _ := os.ReadFile(procs)
	os.WriteFile(procs, append(b, "1003\n1050\n1051\n"...), 0o644)
	hold := make(chan struct{})
	src := &heldExecs{fakeExecs{batches: [][]execwatch.Event{{{Pid: 1003}, {Pid: 1050, Parent: 700}}}, errs: []error{nil}}, hold}
	done := make(chan struct{})
	go func() {
		p.watchExecs(context.Background(), func() (execSource, error) { return src, nil })
		close(done)
	}()
	defer func() { close(hold); <-done }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a, _ := os.ReadFile(filepath.Join(root, "proc/1050/oom_score_adj"))
		b, _ := os.ReadFile(filepath.Join(root, "proc/1051/oom_score_adj"))
		if string(a) == "900\n" && string(b) == "900\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("forks without an event naming a followed parent not set: %q, %q", a, b)
		}
	}
}

// An exec'd process that exits between the event naming its container and
// its score being set has left its cgroup (its /proc shows the root's):
// refused there, it is still followed, and its child set.
func TestExitingExecdProcessFollowed(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{guarded}, 1) // 1001 in main
	cg := mustResolve(t, guarded.Linux.CgroupsPath)
	p := startedWith(t, root, pod, guarded)
	fakeProc(root, "1060", "/", "-997")
	os.WriteFile(filepath.Join(root, "proc", "1060", "stat"), []byte("1060 (forker) R 600 1060 1060 0 -1 4194564 0 0 0 0\n"), 0o644)
	fakeProc(root, "1061", cg, "-997")
	p.scored.mu.Lock()
	p.scored.byID[42] = p.scoredGuards()[0] // as the kernel's filter names it
	p.scored.mu.Unlock()
	src := &fakeExecs{batches: [][]execwatch.Event{{{Pid: 1060, Cgroup: 42}, {Pid: 1061, Parent: 1060}}}, errs: []error{nil}}
	p.watchExecs(context.Background(), func() (execSource, error) { return src, nil })
	if b, _ := os.ReadFile(filepath.Join(root, "proc/1061/oom_score_adj")); string(b) != "900\n" {
		t.Errorf("the exiting process's child: %q, want 900", b)
	}
}

// A flood of execs in one container walks it once per sweepAfter, not once
// an exec; stopping drops the walk to come.
func TestSweepOncePending(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	p := startedWith(t, fixtureNode(t, []*api.Container{guarded}, 1), pod, guarded)
	g := p.scoredGuards()[0]
	s := newSweeper(p, time.Hour)
	for range 20000 {
		s.soon(g)
	}
	if n := len(s.pending); n != 1 {
		t.Fatalf("%d walks pending, want 1", n)
	}
	s.stop()
	s.soon(g)
	p.waitBackground()
	if n := len(s.pending); n != 0 {
		t.Fatalf("%d walks pending after stop", n)
	}
}

// heldExecs is fakeExecs whose last read waits for hold to close, as the
// kernel's source waits for the next event.
type heldExecs struct {
	fakeExecs
	hold chan struct{}
}

func (h *heldExecs) Read(evs []execwatch.Event) ([]execwatch.Event, error) {
	if len(h.batches) == 0 {
		<-h.hold
	}
	return h.fakeExecs.Read(evs)
}

// fakeProc is a process of the fixture node: its cgroup (v2) and score.
func fakeProc(root, pid, cgroup, score string) {
	os.MkdirAll(filepath.Join(root, "proc", pid), 0o755)
	os.WriteFile(filepath.Join(root, "proc", pid, "cgroup"), []byte("0::"+cgroup+"\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc", pid, "oom_score_adj"), []byte(score+"\n"), 0o644)
}

// startedWith is a plugin on the shipped rules that started ctr, its reply sent.
func startedWith(t *testing.T, root string, pod *api.PodSandbox, ctr *api.Container) *Plugin {
	t.Helper()
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	if err := p.StartContainer(context.Background(), pod, ctr); err != nil {
		t.Fatal(err)
	}
	p.waitBackground()
	return p
}

func TestRecentIsBounded(t *testing.T) {
	r := newRecent(3, 3, time.Minute)
	now := time.Now()
	g := &guard{}
	for pid := range 10 {
		r.add(pid+1, owner{g: g}, now)
	}
	if got, _ := r.get(10, now); len(r.procs) > 3 || got != g {
		t.Fatalf("%d kept (want at most 3, the newest among them)", len(r.procs))
	}
	if _, ok := r.get(10, now.Add(2*time.Minute)); ok {
		t.Fatal("an old entry still followed")
	}
}

// A flood of execs in one container, or of processes gone before they
// were read, never pushes another container's process out of the set
// before its forks come; each container's oldest go first.
func TestRecentFloodKeepsOthers(t *testing.T) {
	r := newRecent(maxRecent, maxRecentPer, recentFor)
	now := time.Now()
	victim, flood := owner{g: &guard{}}, owner{g: &guard{}}
	// A shell's commands, gone before their execs were read, and a
	// runtime's exec gone the same way (its parent then followed).
	shell, runtime := owner{by: 50}, owner{by: 60}
	r.add(1, victim, now)
	r.add(2, runtime, now)
	r.add(60, runtime, now)
	for pid := range 20000 {
		r.add(100+pid, flood, now)
		r.add(100000+pid, shell, now)
		r.add(100+pid, flood, now) // the same process again: one entry
	}
	if g, ok := r.get(1, now); !ok || g != victim.g {
		t.Fatal("the flood pushed another container's process out")
	}
	if _, ok := r.get(60, now); !ok {
		t.Fatal("the flood of gone processes pushed another gone one's parent out")
	}
	if len(r.procs) > maxRecent || r.live(flood) > maxRecentPer || r.live(shell) > maxRecentPer {
		t.Fatalf("%d kept, %d of the flood's, %d gone ones: want at most %d, %d each", len(r.procs), r.live(flood), r.live(shell), maxRecent, maxRecentPer)
	}
	if _, ok := r.get(100+19999, now); !ok {
		t.Fatal("the flood's newest process is not followed")
	}
	if _, ok := r.get(100, now); ok {
		t.Fatal("the flood's oldest process is still followed")
	}
	// Many containers at once fill the set: the one with the most gives way.
	r = newRecent(16, 8, recentFor)
	for i := range 16 {
		r.add(i, owner{g: &guard{}}, now)
	}
	r.add(99, flood, now)
	if len(r.procs) > 16 {
		t.Fatalf("%d kept, want at most 16", len(r.procs))
	}
}

// fakeFilter is the kernel's exec filter: the cgroup ids it watches.
type fakeFilter struct {
	mu      sync.Mutex
	watched map[uint64]bool
}

func (f *fakeFilter) Watch(id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watched[id] = true
	return nil
}

func (f *fakeFilter) Unwatch(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.watched, id)
}

// A container removed while its start's filter update (after the reply)
// is still to run is not left watched.
func TestRemovedBeforeFilterUpdateNotWatched(t *testing.T) {
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range 500 {
		pod := nriruntime.KubeletPod(strconv.Itoa(i), "ml", "guaranteed", "runc", nil)
		pods, ctrs = append(pods, pod), append(ctrs, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	}
	root := fixtureNode(t, ctrs, 1)
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	f := &fakeFilter{watched: map[uint64]bool{}}
	var filter cgroupFilter = f
	p.scored.filter.Store(&filter)
	for i := range ctrs {
		if err := p.StartContainer(context.Background(), pods[i], ctrs[i]); err != nil {
			t.Fatal(err)
		}
		if err := p.RemoveContainer(context.Background(), pods[i], ctrs[i]); err != nil {
			t.Fatal(err)
		}
	}
	p.waitBackground()
	if n := len(f.watched); n != 0 {
		t.Errorf("%d removed containers' cgroups still watched", n)
	}
	if n := len(p.scored.byID); n != 0 {
		t.Errorf("%d removed containers still looked up by cgroup id", n)
	}
}
