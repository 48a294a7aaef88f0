package nriplugin

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/syncbuf"
)

// verifyAll verifies every guarded container now: a whole interval's turns.
func (p *Plugin) verifyAll() {
	p.reg.rotate(maxTurns)
	for turn := range maxTurns {
		p.verifyTurn(turn)
	}
}

// The rotation gives each turn once an interval, one a tick, in order;
// a late tick catches up on the turns it passed, each once.
func TestRotationDue(t *testing.T) {
	start := time.Unix(1e9, 0)
	for _, tc := range []struct {
		interval time.Duration
		turns    int
		tick     time.Duration
	}{
		{time.Second, 1, time.Second},
		{1500 * time.Millisecond, 1, 1500 * time.Millisecond},
		{10 * time.Second, 10, time.Second},
		{time.Minute, 60, time.Second},
		{90 * time.Second, 60, 1500 * time.Millisecond},
		{10 * time.Minute, 60, 10 * time.Second},
	} {
		t.Run(tc.interval.String(), func(t *testing.T) {
			r := newRotation(tc.interval, start)
			if r.turns != tc.turns || r.tick != tc.tick {
				t.Fatalf("%d turns of %s, want %d of %s", r.turns, r.tick, tc.turns, tc.tick)
			}
			if got := r.due(start.Add(tc.tick / 2)); len(got) != 0 {
				t.Fatalf("before the first tick: %v", got)
			}
			// On time, a little late each: one turn a tick, in order.
			for k := 1; k <= 3*r.turns; k++ {
				now := start.Add(time.Duration(k)*r.tick + time.Millisecond)
				if got := r.due(now); !slices.Equal(got, []int{(k - 1) % r.turns}) {
					t.Fatalf("tick %d: turns %v, want [%d]", k, got, (k-1)%r.turns)
				}
				if got := r.due(now); len(got) != 0 { // the same tick again: nothing
					t.Fatalf("tick %d again: turns %v", k, got)
				}
			}
			// Late by five ticks: the five turns passed, in order (an
			// interval's at most).
			done := 3 * r.turns
			got := r.due(start.Add(time.Duration(done+5) * r.tick))
			var want []int
			for n := max(done, done+5-r.turns); n < done+5; n++ {
				want = append(want, n%r.turns)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("a late tick: turns %v, want %v", got, want)
			}
			// Late by three intervals: every turn once.
			got = r.due(start.Add(time.Duration(done+5+3*r.turns) * r.tick))
			if slices.Sort(got); len(got) != r.turns || len(slices.Compact(got)) != r.turns {
				t.Fatalf("three intervals late: turns %v, want each of %d once", got, r.turns)
			}
		})
	}
}

// The turns split the guarded containers: each in exactly one, at the
// same turn every time, in the same order, the turns about even; one
// removed or replaced leaves its turn, one added joins it, once.
func TestTurnGuardsSplitTheContainers(t *testing.T) {
	for _, kind := range []string{"hex", "bench"} {
		t.Run(kind, func(t *testing.T) {
			r := newRegistry()
			const n = 2000
			var ids []string
			for i := range n {
				id := fmt.Sprintf("pod-%d-main", i) // as the benchmarks name them
				if kind == "hex" {
					id = fmt.Sprintf("%x", sha256.Sum256([]byte(id))) // as containerd and CRI-O do
				}
				ids = append(ids, id)
				if i == n/2 {
					r.rotate(maxTurns) // half before the verifier starts, half after
				}
				r.put(&record{id: id, guard: &guard{id: id}})
			}
			r.put(&record{id: "unguarded"})
			// round reads every turn once: how many times each container came.
			round := func() map[string]int {
				seen := map[string]int{}
				for turn := range maxTurns {
					for _, g := range r.turnGuards(turn) {
						seen[g.id]++
						if got := turnIn(turnOf(g.id), maxTurns); got != turn {
							t.Fatalf("%s in turn %d, its own is %d", g.id, turn, got)
						}
					}
				}
				return seen
			}
			most, least := 0, n
			for turn := range maxTurns {
				gs := r.turnGuards(turn)
				if !slices.IsSortedFunc(gs, func(a, b *guard) int { return strings.Compare(a.id, b.id) }) {
					t.Fatalf("turn %d not in the order of the IDs", turn)
				}
				if again := r.turnGuards(turn); !slices.Equal(again, gs) {
					t.Fatalf("turn %d read again differs", turn)
				}
				most, least = max(most, len(gs)), min(least, len(gs))
			}
			seen := round()
			for _, id := range ids {
				if seen[id] != 1 {
					t.Fatalf("%s in %d turns, want 1", id, seen[id])
				}
			}
			if len(seen) != n {
				t.Fatalf("%d containers in the turns, want %d", len(seen), n)
			}
			// 33.3 a turn on average.
			if mean := n / maxTurns; most > 2*mean || least < mean/2 {
				t.Fatalf("turns hold %d to %d containers, want about %d each", least, most, mean)
			}
			t.Logf("%d containers in %d turns: %d to %d a turn", n, maxTurns, least, most)

			// Removed, replaced (a new record, a new plan), removed and put back.
			r.remove(ids[0])
			r.put(&record{id: ids[1], guard: &guard{id: ids[1]}})
			back := r.remove(ids[2])
			r.put(back)
			r.update(ids[3], func(rec *record) { rec.guard = &guard{id: ids[3]} })
			seen = round()
			if seen[ids[0]] != 0 || seen[ids[1]] != 1 || seen[ids[2]] != 1 || seen[ids[3]] != 1 || len(seen) != n-1 {
				t.Fatalf("after changes: removed %d, replaced %d, put back %d, new plan %d times, %d containers",
					seen[ids[0]], seen[ids[1]], seen[ids[2]], seen[ids[3]], len(seen))
			}
			queued := 0
			for _, q := range r.turns {
				queued += len(q)
			}
			if queued != n { // the guarded ones left but the removed, and the unguarded record
				t.Fatalf("%d records queued, want %d", queued, n)
			}
			// A resync: every record new.
			var recs []*record
			for _, id := range ids[:10] {
				recs = append(recs, &record{id: id, guard: &guard{id: id}})
			}
			r.reset(recs)
			if seen = round(); len(seen) != 10 {
				t.Fatalf("%d containers after a resync to 10", len(seen))
			}
			r.rotate(0)
			if gs := r.turnGuards(0); len(gs) != 0 || r.turns != nil {
				t.Fatal("the turns stay queued without a verifier")
			}
		})
	}
}

// rotationNode is a plugin and a fixture node: the containers guarded,
// one more made but not started yet, and what the test reads and writes
// of each.
type rotationNode struct {
	t    *testing.T
	p    *Plugin
	logs *syncbuf.Buffer
	root string
	pods []*api.PodSandbox
	ctrs []*api.Container
}

func newRotationNode(t *testing.T, n int) *rotationNode {
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	rn := &rotationNode{t: t, logs: &syncbuf.Buffer{}}
	for i := range n {
		pod := nriruntime.KubeletPod(fmt.Sprintf("rot%d", i), "ml", "guaranteed", "runc", nil)
		rn.pods, rn.ctrs = append(rn.pods, pod), append(rn.ctrs, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	}
	rn.root = fixtureNode(t, rn.ctrs, 2)
	rn.p = New(Options{Config: cfg, Root: rn.root, Log: slog.New(slog.NewTextHandler(rn.logs, nil)), Metrics: NewMetrics()})
	return rn
}

func (rn *rotationNode) start(i int) {
	if err := rn.p.StartContainer(context.Background(), rn.pods[i], rn.ctrs[i]); err != nil {
		rn.t.Fatal(err)
	}
	if !rn.kept(i) {
		rn.t.Fatalf("container %d not set at its start", i)
	}
}

func (rn *rotationNode) file(i int, name string) string {
	return filepath.Join(rn.root, "sys/fs/cgroup", mustResolve(rn.t, rn.ctrs[i].Linux.CgroupsPath), name)
}

// pid is the second process of container i (fixtureNode's numbering).
func (rn *rotationNode) pid(i int) string {
	return filepath.Join(rn.root, "proc", fmt.Sprint(1000+2*i+2), "oom_score_adj")
}

// drift changes container i's group flag and one process's score back to
// kubelet's.
func (rn *rotationNode) drift(i int) {
	os.WriteFile(rn.file(i, "memory.oom.group"), []byte("1\n"), 0o644)
	os.WriteFile(rn.pid(i), []byte("-997\n"), 0o644)
}

// kept reports whether container i holds its plan (900, group off); a
// half-restored container fails the test.
func (rn *rotationNode) kept(i int) bool {
	g, _ := os.ReadFile(rn.file(i, "memory.oom.group"))
	s, _ := os.ReadFile(rn.pid(i))
	switch {
	case string(g) == "0\n" && string(s) == "900\n":
		return true
	case string(g) == "1\n" && string(s) == "-997\n":
		return false
	}
	rn.t.Fatalf("container %d half restored: group %q, score %q", i, g, s)
	return false
}

// corrected is how many times the log says container i's drift was
// corrected.
func (rn *rotationNode) corrected(i int) int {
	rn.p.waitBackground()
	n := 0
	for line := range strings.Lines(rn.logs.String()) {
		if strings.Contains(line, `msg="drift corrected"`) && strings.Contains(line, "pod=ml/"+rn.pods[i].Name+" ") &&
			strings.Contains(line, "oom_group=") {
			n++
		}
	}
	return n
}

// The verifier's rotation, tick by tick: each container is verified at
// its own turn, exactly once an interval (drifted again right after its
// turn, it stays so until its turn comes again), in the same order every
// interval; a change is set back within one interval; a container that
// joins mid-interval is verified within an interval of joining, one that
// leaves no more.
func TestVerifierRotation(t *testing.T) {
	const n = 40
	rn := newRotationNode(t, n+1) // the last joins mid-interval
	// Each drifts again after each turn, as another writer would: fought here, not yielded to.
	cfg := *rn.p.cfg.Load()
	cfg.NRI.YieldToOtherWriters = false
	rn.p.cfg.Store(&cfg)
	for i := range n {
		rn.start(i)
	}
	for i := range n {
		rn.drift(i)
	}
	start := time.Unix(1e9, 0)
	r := newRotation(time.Minute, start)
	rn.p.reg.rotate(r.turns)
	tick := 0
	// step runs the next tick, and returns the containers set back by it.
	step := func() []int {
		tick++
		for _, turn := range r.due(start.Add(time.Duration(tick) * r.tick)) {
			rn.p.verifyTurn(turn)
		}
		var back []int
		for i := range len(rn.ctrs) {
			if !rn.kept(i) {
				continue
			}
			back = append(back, i)
			rn.drift(i) // again, at once: the next verification is the next interval's
		}
		return back
	}
	turnOfCtr := func(i int) int { return turnIn(turnOf(rn.ctrs[i].Id), r.turns) }

	// The first interval: each container set back once, at its own turn.
	at := map[int]int{}
	for range r.turns {
		for _, i := range step() {
			if _, twice := at[i]; twice {
				t.Fatalf("container %d verified twice in one interval", i)
			}
			at[i] = tick
			if want := turnOfCtr(i) + 1; tick != want {
				t.Fatalf("container %d verified at tick %d, its turn is tick %d", i, tick, want)
			}
		}
	}
	if len(at) != n {
		t.Fatalf("%d of %d containers verified in the first interval", len(at), n)
	}
	// The second: the same, at the same ticks; meanwhile one joins and
	// one leaves, halfway.
	joined, left := n, 0
	joinedAt, joinedBack := 0, 0
	again := map[int]int{}
	for range r.turns {
		if tick == r.turns+r.turns/2 {
			rn.start(joined)
			rn.drift(joined)
			joinedAt = tick
			if err := rn.p.RemoveContainer(context.Background(), rn.pods[left], rn.ctrs[left]); err != nil {
				t.Fatal(err)
			}
		}
		for _, i := range step() {
			if i == joined {
				joinedBack = tick
				continue
			}
			if _, twice := again[i]; twice {
				t.Fatalf("container %d verified twice in the second interval", i)
			}
			again[i] = tick - r.turns
		}
	}
	for i := 1; i < n; i++ {
		if again[i] != at[i] {
			t.Fatalf("container %d verified at tick %d of the second interval, %d of the first", i, again[i], at[i])
		}
	}
	if tk, ok := again[left]; ok && tk+r.turns > joinedAt {
		t.Fatalf("container %d verified at tick %d, after it was removed at %d", left, tk+r.turns, joinedAt)
	}
	// The one that joined: set back within an interval of joining, at its turn.
	for joinedBack == 0 && tick < joinedAt+r.turns {
		if slices.Contains(step(), joined) {
			joinedBack = tick
		}
	}
	if joinedBack == 0 || rn.corrected(joined) != 1 {
		t.Fatalf("the container that joined at tick %d was not set back within an interval (its turn is %d)", joinedAt, turnOfCtr(joined))
	}
	if (joinedBack-1-turnOfCtr(joined))%r.turns != 0 {
		t.Fatalf("the container that joined was verified at tick %d, not at its turn %d", joinedBack, turnOfCtr(joined))
	}
	// The one that left: never again, its drift left as it is.
	rn.drift(left)
	for range r.turns {
		step()
	}
	if rn.kept(left) {
		t.Fatal("a removed container was verified")
	}
	for i := 1; i < n; i++ {
		if c := rn.corrected(i); c != tick/r.turns && c != tick/r.turns+1 {
			t.Fatalf("container %d corrected %d times in %d intervals", i, c, tick/r.turns)
		}
	}
}

// The loop itself, on the clock: a change is set back (within an interval
// by the rotation's ticks: TestVerifierRotation; here the loop drives them,
// on a machine whose load no bound could foresee).
func TestVerifyLoopSetsBack(t *testing.T) {
	rn := newRotationNode(t, 3)
	for i := range 3 {
		rn.start(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	interval := 2 * time.Second // two turns of a second
	go func() { defer close(done); rn.p.verifyLoop(ctx, interval) }()
	defer func() { cancel(); <-done }()
	for i := range 3 {
		rn.drift(i)
	}
	for i := range 3 {
		for {
			g, _ := os.ReadFile(rn.file(i, "memory.oom.group"))
			s, _ := os.ReadFile(rn.pid(i))
			if string(g) == "0\n" && string(s) == "900\n" {
				break
			}
			time.Sleep(10 * time.Millisecond) // go test's -timeout ends a loop that never sets it back
		}
	}
}

// BenchmarkVerify is the verifier's work per container: a fixture tree
// made like a node's, three processes a container, at its plan.
func BenchmarkVerify(b *testing.B) {
	const n = 500
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range n {
		pod := nriruntime.KubeletPod(fmt.Sprintf("v%d", i), "ml", "guaranteed", "runc", nil)
		pods, ctrs = append(pods, pod), append(ctrs, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	}
	root := fixtureNode(b, ctrs, 3)
	benchVerify(b, root, pods, ctrs)
}

// benchVerify starts the containers in a plugin on root, at the shipped
// configuration, and verifies them one after another, round and round.
func benchVerify(b *testing.B, root string, pods []*api.PodSandbox, ctrs []*api.Container) {
	cfg, err := config.Load(shippedConfig)
	if err != nil {
		b.Fatal(err)
	}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: NewMetrics()})
	for i := range pods {
		if err := p.StartContainer(context.Background(), pods[i], ctrs[i]); err != nil {
			b.Fatal(err)
		}
	}
	gs := p.reg.guards()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		p.verify(gs[i%len(gs)], "verify")
		i++
	}
}

// BenchmarkVerifyHost is the verifier's work per container on this host's
// cgroup tree (root only): a real cgroup and process each.
func BenchmarkVerifyHost(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	mode := kernel.DetectMode("/")
	const n = 100
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	var made []string
	b.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			os.Remove(made[i])
		}
	})
	for i := range n {
		pod := nriruntime.KubeletPod(fmt.Sprintf("vh%d", i), "ml", "guaranteed", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
		sleeper := exec.Command("sleep", "3600")
		if err := sleeper.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
		cg := mustResolve(b, ctr.Linux.CgroupsPath)
		var up []string
		for d := cg; d != "/"; d = filepath.Dir(d) {
			up = append(up, kernel.MemoryCgroupDir("/", mode, d))
		}
		for j := len(up) - 1; j >= 0; j-- {
			if err := os.Mkdir(up[j], 0o755); err == nil {
				made = append(made, up[j])
			} else if !os.IsExist(err) {
				b.Skip(err)
			}
			if mode == kernel.ModeV2 && j > 0 {
				os.WriteFile(filepath.Join(up[j], "cgroup.subtree_control"), []byte("+memory +pids"), 0)
			}
		}
		if err := os.WriteFile(filepath.Join(up[0], "cgroup.procs"), []byte(fmt.Sprint(sleeper.Process.Pid)), 0); err != nil {
			b.Fatal(err)
		}
		ctr.Pid = uint32(sleeper.Process.Pid)
		pods, ctrs = append(pods, pod), append(ctrs, ctr)
	}
	benchVerify(b, "/", pods, ctrs)
}
