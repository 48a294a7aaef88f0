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
	// 1003 exec'd into main (below it, as in a systemd's child cgroup), 1004 on the host.
	for pid, c := range map[string]string{"1003": cg + "/init.scope", "1004": "/system.slice/sshd.service"} {
		os.MkdirAll(filepath.Join(root, "proc", pid), 0o755)
		os.WriteFile(filepath.Join(root, "proc", pid, "cgroup"), []byte("0::"+c+"\n"), 0o644)
		os.WriteFile(filepath.Join(root, "proc", pid, "oom_score_adj"), []byte("-997\n"), 0o644)
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
	src := &fakeExecs{batches: [][]execwatch.Event{execs(1003, 1004, 99999), execs(1002)}, errs: []error{nil, execwatch.ErrLost}}
	p.watchExecs(context.Background(), func() (execSource, error) { return src, nil })
	for pid, want := range map[string]string{"1003": "900\n", "1004": "-997\n", "1002": "-997\n"} {
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
		os.MkdirAll(filepath.Join(root, "proc", pid), 0o755)
		os.WriteFile(filepath.Join(root, "proc", pid, "cgroup"), []byte("0::"+cg+"\n"), 0o644)
		os.WriteFile(filepath.Join(root, "proc", pid, "oom_score_adj"), []byte(score+"\n"), 0o644)
	}
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	if err := p.StartContainer(context.Background(), pod, guarded); err != nil {
		t.Fatal(err)
	}
	p.waitBackground()
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

func TestRecentIsBounded(t *testing.T) {
	r := newRecent(3, time.Minute)
	now := time.Now()
	g := &guard{}
	for pid := range 10 {
		r.add(pid+1, g, now)
	}
	if len(r.procs) > 3 || r.get(10, now) != g {
		t.Fatalf("%d kept (want at most 3, the newest among them)", len(r.procs))
	}
	if r.get(10, now.Add(2*time.Minute)) != nil {
		t.Fatal("an old entry still followed")
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
