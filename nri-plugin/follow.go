package nriplugin

import (
	"sync"
	"time"

	"github.com/oomguard/oomguard/internal/enforce"
)

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
		p.scoreAll(g, "set after the kernel dropped process events")
	}
}

// scoreAll sets every process of g's container that lacks its score, and
// says so with why when there was any.
func (p *Plugin) scoreAll(g *guard, why string) {
	if g.plan.Score == nil || !p.current(g) {
		return
	}
	c, err := p.container(g, "exec")
	if err != nil {
		return
	}
	if n, _ := p.enforceScore(g, c, "exec"); n > 0 {
		p.log.Info(why, g.attrs("processes", n, enforce.SettingScore, *g.plan.Score)...)
	}
}

// sweeper walks a container's processes once more, shortly after a
// process exec'd into it was set or found gone: whatever that process
// forked before it was set, under whatever parent its events named, took
// the spec's score, and exists then (or its children do, forked from it
// at that score). One walk pending a container at most: a flood of execs
// in one container costs a walk of it every sweepAfter.
type sweeper struct {
	p       *Plugin
	after   time.Duration
	mu      sync.Mutex
	pending map[*guard]*time.Timer
	stopped bool
}

func newSweeper(p *Plugin, after time.Duration) *sweeper {
	return &sweeper{p: p, after: after, pending: map[*guard]*time.Timer{}}
}

func (s *sweeper) soon(g *guard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.pending[g] != nil {
		return
	}
	s.p.background.Add(1)
	s.pending[g] = time.AfterFunc(s.after, func() {
		defer s.p.background.Done()
		s.mu.Lock()
		delete(s.pending, g)
		s.mu.Unlock()
		s.p.scoreAll(g, "set what an exec'd process forked that its fork events did not tell of")
	})
}

// stop drops the walks not started yet.
func (s *sweeper) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for g, t := range s.pending {
		if t.Stop() {
			s.p.background.Done()
		}
		delete(s.pending, g)
	}
}

// sweepAfter is how long after an exec its container is walked: time for
// what it forked at once to exist, a sliver of the verifier's interval.
const sweepAfter = 200 * time.Millisecond

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
// their containers. Each owner's entries are dropped oldest first, at most
// per of them; when all of them reach max, the oldest of the owner with
// the most.
type recent struct {
	max, per int
	keep     time.Duration
	procs    map[int]recentProc
	order    map[owner][]recentPid // each owner's, oldest first; stale ones skipped
}

// owner is whom a followed process counts against: its container, or, for
// one gone before its container was known, the process that forked it, so
// that a shell's flood of short-lived commands pushes out only its own.
type owner struct {
	g  *guard
	by int
}

type recentProc struct {
	o  owner
	at time.Time
}

type recentPid struct {
	pid int
	at  time.Time
}

func newRecent(most, per int, keep time.Duration) *recent {
	return &recent{max: max(most, 1), per: max(per, 1), keep: keep, procs: map[int]recentProc{}, order: map[owner][]recentPid{}}
}

func (r *recent) add(pid int, o owner, now time.Time) {
	delete(r.procs, pid)
	for r.live(o) >= r.per {
		r.dropOldest(o)
	}
	for len(r.procs) >= r.max {
		r.dropOldest(r.largest())
	}
	r.procs[pid] = recentProc{o, now}
	r.order[o] = append(r.order[o], recentPid{pid, now})
}

// live is how many of o's queued entries are still its own.
func (r *recent) live(o owner) int {
	q := r.order[o]
	for len(q) > 0 && !r.current(q[0]) {
		q = q[1:]
	}
	if len(q) == 0 {
		delete(r.order, o)
		return 0
	}
	if cap(q) > 2*len(q)+64 {
		q = append([]recentPid(nil), q...)
	}
	r.order[o] = q
	return len(q)
}

// current reports whether a queued entry is still the one its pid has.
func (r *recent) current(e recentPid) bool {
	rp, ok := r.procs[e.pid]
	return ok && rp.at.Equal(e.at)
}

func (r *recent) dropOldest(o owner) {
	if r.live(o) == 0 {
		return
	}
	q := r.order[o]
	delete(r.procs, q[0].pid)
	r.order[o] = q[1:]
}

// largest is the owner with the most entries.
func (r *recent) largest() owner {
	var most owner
	n := -1
	for o, q := range r.order {
		if len(q) > n {
			most, n = o, len(q)
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
	return rp.o.g, true
}
