package nriplugin

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/execwatch"
	"github.com/oomguard/oomguard/internal/kernel"
)

// execSource is the kernel's process events (execwatch), or a test's.
type execSource interface {
	Read(evs []execwatch.Event) ([]execwatch.Event, error)
	Close() error
}

// cgroupFilter is a source filtered in the kernel by cgroup
// (execwatch.Filtered): only the watched cgroups' processes reach it.
type cgroupFilter interface {
	Watch(id uint64) error
	Unwatch(id uint64)
}

// openExecs is the kernel's events filtered by cgroup where it can (cgroup
// v2, eBPF), else every exec and fork on the node (the process connector).
func (p *Plugin) openExecs() (execSource, error) {
	if p.node.Load().Mode() == kernel.ModeV2 {
		f, err := execwatch.OpenFiltered()
		if err == nil {
			return f, nil
		}
		p.log.Info("watching execs through the process connector (every exec on the node wakes the plugin): filtering them in the kernel needs eBPF", "err", err)
	}
	return execwatch.Open()
}

// watchExecs sets each process that execs in a guarded container to the
// container's score at once: a process exec'd into it (kubectl exec, an exec
// probe) starts at the score in its spec, which oomguard does not claim.
// What such a process forked before it was set took the spec's score too:
// each fork of a process oomguard just set is set as well, down the tree,
// so the gap is the events' delay, not the verifier's interval. Without
// the kernel's process events (no CAP_NET_ADMIN, another network
// namespace) the verifier still finds them.
func (p *Plugin) watchExecs(ctx context.Context, open func() (execSource, error)) {
	src, err := open()
	if err != nil {
		p.log.Warn("not watching execs; processes exec'd into guarded containers are set at the next verification", "err", err)
		return
	}
	filter, _ := src.(cgroupFilter)
	how := "process connector"
	if filter != nil {
		how = "eBPF, filtered by cgroup"
	}
	p.log.Info("watching execs", "source", how)
	done := make(chan struct{})
	go func() { p.keepScored(ctx, filter); close(done) }()
	go func() { <-ctx.Done(); <-done; src.Close() }()
	set := newRecent(maxRecent, maxRecentPer, recentFor)
	var evs []execwatch.Event
	lost := newRescorer(p)
	defer lost.stop()
	forks := newForkedBy(maxRecent)
	for ctx.Err() == nil {
		evs, err = src.Read(evs[:0])
		switch {
		case errors.Is(err, execwatch.ErrLost):
			p.m.execLost.Inc()
			lost.lost() // what the dropped events told of is not followed
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("watching execs failed; processes exec'd into guarded containers are set at the next verification", "err", err)
			}
			return
		}
		now := time.Now()
		for _, e := range evs {
			if e.Parent == 0 {
				p.execd(e, set, forks, now)
				continue
			}
			forks.add(e.Pid, e.Parent)
			g, ok := set.get(e.Parent, now)
			if !ok {
				continue
			}
			if g == nil { // its parent had exited before its exec was read: the child says where it runs
				var exited bool
				if g, exited, _ = p.guardAt(e.Pid); g == nil {
					if exited {
						set.add(e.Pid, nil, now)
					}
					continue
				}
			}
			if p.setProcess(g, e, "fork") {
				set.add(e.Pid, g, now)
			}
		}
	}
}

// execd sets the process that exec'd to its container's score if its
// container is guarded, and follows its forks when it changed the score
// (what it forked before then has the spec's score too) or found it gone.
// An exec the kernel filtered names its container's cgroup; else /proc
// says, unless no container has a score to set. A fork that names another
// parent (clone with CLONE_PARENT) names the exec'd process's parent: that
// parent's forks are followed too, and set only where they run in g. A
// process that exited before its exec was read names no container: its
// forks, and its parent's, are looked up where they run.
func (p *Plugin) execd(e execwatch.Event, set *recent, forks *forkedBy, now time.Time) {
	// Its parent now, and the one it was forked by (a runtime's exec hands
	// it to a subreaper when it exits): a CLONE_PARENT child names either.
	follow := func(g *guard, ppid int) {
		for _, pp := range []int{ppid, forks.parent(e.Pid)} {
			if pp > 1 && !set.has(pp, now) {
				set.add(pp, g, now)
			}
		}
	}
	var g *guard
	if e.Cgroup != 0 {
		g = p.scored.of(e.Cgroup)
	} else if p.scored.any.Load() {
		var exited bool
		var ppid int
		if g, exited, ppid = p.guardAt(e.Pid); exited {
			set.add(e.Pid, nil, now)
			follow(nil, ppid)
			return
		}
	}
	if g == nil || !p.setProcess(g, e, "exec") {
		return
	}
	set.add(e.Pid, g, now)
	ppid, _, _ := kernel.Parent(p.root, e.Pid)
	follow(g, ppid)
}

// forkedBy is the parent each of the last forks read named, for an exec'd
// process whose /proc no longer says.
type forkedBy struct {
	ring    []forkPair
	next    int
	byChild map[int]int
}

type forkPair struct{ child, parent int }

func newForkedBy(n int) *forkedBy {
	return &forkedBy{ring: make([]forkPair, n), byChild: make(map[int]int, n)}
}

func (f *forkedBy) add(child, parent int) {
	if old := f.ring[f.next]; old.child != 0 && f.byChild[old.child] == old.parent {
		delete(f.byChild, old.child)
	}
	f.ring[f.next] = forkPair{child, parent}
	f.byChild[child] = parent
	f.next = (f.next + 1) % len(f.ring)
}

func (f *forkedBy) parent(child int) int { return f.byChild[child] }

// guardAt is the guarded container the process runs in, by /proc: nil
// when none. exited: it has exited, gone or a zombie (whose /proc shows
// the root cgroup, not the one it ran in), and then ppid is its parent
// when a zombie's /proc still says.
func (p *Plugin) guardAt(pid int) (g *guard, exited bool, ppid int) {
	cg, err := p.node.Load().Cgroup(pid)
	switch {
	case enforce.IsGone(err):
		return nil, true, 0
	case err == nil && cg != "/":
		return p.guardOf(cg), false, 0
	}
	// The root cgroup, or a /proc that could not say: one exiting reads so.
	ppid, exited, err = kernel.Parent(p.root, pid)
	if err != nil {
		return nil, enforce.IsGone(err), 0
	}
	return nil, exited, ppid
}

// setProcess sets the event's process, one of g's container, to g's
// score; it reports whether its forks are to be followed: it changed the
// score, or the process is gone (what it forked before it exited has the
// spec's score too).
func (p *Plugin) setProcess(g *guard, e execwatch.Event, how string) bool {
	if g.plan.Score == nil || !p.current(g) {
		return false
	}
	c, err := p.container(g, "exec")
	if err != nil {
		return false
	}
	pid := e.Pid
	ch := c.Score(pid, *g.plan.Score)
	switch {
	case ch.What == enforce.Changed:
		p.m.adjustments.WithLabelValues(enforce.SettingScore, "exec").Inc()
		attrs := g.attrs("pid", pid, enforce.SettingScore, ch.String())
		if e.Time > 0 {
			attrs = append(attrs, "after", execwatch.Now()-e.Time)
		}
		p.log.Debug(how+"'d process set", attrs...)
		return true
	case enforce.IsGone(ch.Err):
		return true
	case ch.Err != nil && ch.What != enforce.Refused:
		p.m.errors.WithLabelValues("exec").Inc()
		p.log.Warn("setting an "+how+"'d process failed", g.attrs("pid", pid, "err", ch.Err)...)
	}
	return false
}

// rescorer sets every guarded container's processes again, as the
// verifier would, after the kernel dropped process events: at once, or,
// within rescoreEvery of the last time, when that is up, so that every
// loss is followed by a walk that starts after it.
type rescorer struct {
	p       *Plugin
	mu      sync.Mutex
	last    time.Time
	pending *time.Timer
}

func newRescorer(p *Plugin) *rescorer { return &rescorer{p: p} }

func (r *rescorer) lost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending != nil {
		return
	}
	wait := rescoreEvery - time.Since(r.last)
	if wait <= 0 {
		r.last = time.Now()
		r.p.afterReply(r.p.rescoreAll)
		return
	}
	r.p.background.Add(1)
	r.pending = time.AfterFunc(wait, func() {
		defer r.p.background.Done()
		r.mu.Lock()
		r.pending, r.last = nil, time.Now()
		r.mu.Unlock()
		r.p.rescoreAll()
	})
}

// stop drops a walk not started yet.
func (r *rescorer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending != nil && r.pending.Stop() {
		r.p.background.Done()
	}
	r.pending = nil
}

// rescoreAll sets every guarded container's processes again.
func (p *Plugin) rescoreAll() {
	for _, g := range p.scoredGuards() {
		if !p.current(g) {
			continue
		}
		c, err := p.container(g, "exec")
		if err != nil {
			continue
		}
		if n, _ := p.enforceScore(g, c, "exec"); n > 0 {
			p.log.Info("set after the kernel dropped process events", g.attrs("processes", n, enforce.SettingScore, *g.plan.Score)...)
		}
	}
}

// rescoreEvery bounds how often a flood that makes the kernel drop events
// walks every guarded container.
const rescoreEvery = time.Second

// Bounds on the processes whose forks are followed: set moments ago, and a
// fork storm cannot grow the plugin, nor a flood in one container push
// another's out.
const (
	maxRecent    = 4096
	maxRecentPer = maxRecent / 8
	recentFor    = 10 * time.Second
)

// recent are the processes oomguard set (or found gone) moments ago, and
// their containers; nil: a process gone before its container was known.
// Each container's entries are dropped oldest first, at most per of them;
// when all of them reach max, the oldest of the container with the most.
type recent struct {
	max, per int
	keep     time.Duration
	procs    map[int]recentProc
	order    map[*guard][]recentPid // each container's, oldest first; stale ones skipped
}

type recentProc struct {
	g  *guard
	at time.Time
}

type recentPid struct {
	pid int
	at  time.Time
}

func newRecent(most, per int, keep time.Duration) *recent {
	return &recent{max: max(most, 1), per: max(per, 1), keep: keep, procs: map[int]recentProc{}, order: map[*guard][]recentPid{}}
}

func (r *recent) add(pid int, g *guard, now time.Time) {
	delete(r.procs, pid)
	for r.live(g) >= r.per {
		r.dropOldest(g)
	}
	for len(r.procs) >= r.max {
		r.dropOldest(r.largest())
	}
	r.procs[pid] = recentProc{g, now}
	r.order[g] = append(r.order[g], recentPid{pid, now})
}

// live is how many of g's queued entries are still its own.
func (r *recent) live(g *guard) int {
	q := r.order[g]
	for len(q) > 0 && !r.current(q[0]) {
		q = q[1:]
	}
	if len(q) == 0 {
		delete(r.order, g)
		return 0
	}
	if cap(q) > 2*len(q)+64 {
		q = append([]recentPid(nil), q...)
	}
	r.order[g] = q
	return len(q)
}

// current reports whether a queued entry is still the one its pid has.
func (r *recent) current(e recentPid) bool {
	rp, ok := r.procs[e.pid]
	return ok && rp.at.Equal(e.at)
}

func (r *recent) dropOldest(g *guard) {
	if r.live(g) == 0 {
		return
	}
	q := r.order[g]
	delete(r.procs, q[0].pid)
	r.order[g] = q[1:]
}

// largest is the container with the most entries.
func (r *recent) largest() *guard {
	var most *guard
	n := -1
	for g, q := range r.order {
		if len(q) > n {
			most, n = g, len(q)
		}
	}
	return most
}

func (r *recent) has(pid int, now time.Time) bool {
	_, ok := r.get(pid, now)
	return ok
}

// get is the container of a process followed; ok is false for one not
// followed (or no more).
func (r *recent) get(pid int, now time.Time) (*guard, bool) {
	rp, ok := r.procs[pid]
	if !ok {
		return nil, false
	}
	if now.Sub(rp.at) > r.keep {
		delete(r.procs, pid)
		return nil, false
	}
	return rp.g, true
}

// current reports whether g is still the plan in force for its container.
func (p *Plugin) current(g *guard) bool { return p.reg.current(g) }

// guardOf finds the guarded container whose cgroup holds cg.
func (p *Plugin) guardOf(cg string) *guard { return p.reg.guardAt(cg) }
