package nriplugin

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
)

// scored are the guarded containers with a score, by their cgroup's id
// (cgroup v2): what a process that exec'd is looked up in, and what the
// kernel's exec filter watches. It follows the guarded containers as they
// change, one change at a time, so a container's start costs no walk of
// the others.
type scored struct {
	any    atomic.Bool // some guarded container has a score: execs matter
	kick   chan struct{}
	filter atomic.Pointer[cgroupFilter] // the kernel's, while one is open

	mu   sync.Mutex
	byID map[uint64]*guard
	all  bool // re-examine every guarded container
}

func newScored() *scored {
	return &scored{kick: make(chan struct{}, 1), byID: map[uint64]*guard{}}
}

func (s *scored) of(id uint64) *guard {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// guardsChanged says that gs were guarded, replaced or dropped; none:
// anything may have changed, for keepScored to see to. One container is
// seen to at once, without waking another goroutine: this is on the
// creation path.
func (p *Plugin) guardsChanged(gs ...*guard) {
	s := p.scored
	for _, g := range gs {
		if g != nil && g.plan.Score != nil && p.current(g) {
			s.any.Store(true)
		}
	}
	if len(gs) == 0 {
		s.mu.Lock()
		s.all = true
		s.mu.Unlock()
		select {
		case s.kick <- struct{}{}:
		default:
		}
		return
	}
	if f := s.filter.Load(); f != nil {
		for _, g := range gs {
			if g != nil {
				p.rescore(g, *f)
			}
		}
	}
}

// keepScored keeps p.scored, and the kernel's filter (if any) watching
// its cgroups, as the guarded containers change; every resyncEvery, all
// of them again.
func (p *Plugin) keepScored(ctx context.Context, filter cgroupFilter) {
	s := p.scored
	if filter != nil {
		s.filter.Store(&filter)
		defer s.filter.Store(nil)
	}
	t := time.NewTicker(resyncEvery)
	defer t.Stop()
	p.guardsChanged() // those guarded before the watch began
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			s.all = true
			s.mu.Unlock()
		case <-s.kick:
		}
		s.mu.Lock()
		all := s.all
		s.all = false
		s.mu.Unlock()
		if !all {
			continue
		}
		gs := p.scoredGuards()
		s.any.Store(len(gs) > 0)
		s.mu.Lock()
		for id, g := range s.byID { // those no longer guarded
			if !p.current(g) {
				delete(s.byID, id)
				if filter != nil {
					filter.Unwatch(id)
				}
			}
		}
		s.mu.Unlock()
		if p.node.Load().Mode() != kernel.ModeV2 {
			continue // no ids: execs are looked up in /proc
		}
		for _, g := range gs {
			p.rescore(g, filter)
		}
	}
}

// scoredGuards are the guarded containers with a score.
func (p *Plugin) scoredGuards() []*guard {
	var gs []*guard
	for _, g := range p.reg.guards() {
		if g.plan.Score != nil {
			gs = append(gs, g)
		}
	}
	return gs
}

// rescore watches g's cgroup if g is in force with a score, else drops it.
func (p *Plugin) rescore(g *guard, filter cgroupFilter) {
	s := p.scored
	if !p.current(g) || g.plan.Score == nil {
		id := p.reg.cgroupID(g)
		s.mu.Lock()
		defer s.mu.Unlock()
		if id != 0 && s.byID[id] == g {
			delete(s.byID, id)
			if filter != nil {
				filter.Unwatch(id)
			}
		}
		return
	}
	id := p.cgroupID(g)
	if id == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Again under s.mu: a removal's rescore may have run since (StartContainer's runs after its reply).
	if s.byID[id] == g || !p.current(g) {
		return
	}
	if filter != nil {
		if err := filter.Watch(id); err != nil {
			p.m.errors.WithLabelValues("exec").Inc()
			p.log.Warn("the kernel's exec filter refused a container; its exec'd processes are set at the next verification", g.attrs("err", err)...)
			return
		}
	}
	s.byID[id] = g
}

// resyncEvery bounds how long a change keepScored missed lasts.
const resyncEvery = 5 * time.Minute

// cgroupID is g's container cgroup's id, once found (cgroup v2); 0 when
// it cannot tell.
func (p *Plugin) cgroupID(g *guard) uint64 {
	id := p.reg.cgroupID(g)
	if id != 0 {
		return id
	}
	c, err := p.container(g, "exec")
	if err != nil {
		return 0
	}
	if id, err = c.ID(); err != nil {
		return 0
	}
	p.reg.setCgroupID(g, id)
	return id
}
