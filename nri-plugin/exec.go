package nriplugin

import (
	"context"
	"errors"
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
	set := newRecent(maxRecent, recentFor)
	var evs []execwatch.Event
	for ctx.Err() == nil {
		evs, err = src.Read(evs[:0])
		switch {
		case errors.Is(err, execwatch.ErrLost):
			p.m.execLost.Inc()
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("watching execs failed; processes exec'd into guarded containers are set at the next verification", "err", err)
			}
			return
		}
		now := time.Now()
		for _, e := range evs {
			if e.Parent == 0 {
				if g := p.execd(e); g != nil {
					set.add(e.Pid, g, now)
				}
			} else if g := set.get(e.Parent, now); g != nil && p.setProcess(g, e, "fork") {
				set.add(e.Pid, g, now)
			}
		}
	}
}

// execd sets the process that exec'd to its container's score if its
// container is guarded, and returns the container when it changed the
// score: what the process forked before then has the spec's score too.
// An exec the kernel filtered names its container's cgroup; else /proc
// says, unless no container has a score to set.
func (p *Plugin) execd(e execwatch.Event) *guard {
	var g *guard
	if e.Cgroup != 0 {
		g = p.scored.of(e.Cgroup)
	} else if p.scored.any.Load() {
		cg, err := p.node.Load().Cgroup(e.Pid)
		if err != nil {
			return nil // gone already, or not a process this node's view shows
		}
		g = p.guardOf(cg)
	}
	if g == nil || !p.setProcess(g, e, "exec") {
		return nil
	}
	return g
}

// setProcess sets the event's process, one of g's container, to g's
// score; it reports whether it changed it.
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
	case ch.Err != nil && ch.What != enforce.Refused && !enforce.IsGone(ch.Err):
		p.m.errors.WithLabelValues("exec").Inc()
		p.log.Warn("setting an "+how+"'d process failed", g.attrs("pid", pid, "err", ch.Err)...)
	}
	return false
}

// Bounds on the processes whose forks are followed: set moments ago, and a
// fork storm cannot grow the plugin.
const (
	maxRecent = 4096
	recentFor = 10 * time.Second
)

// recent are the processes oomguard set moments ago, and their containers.
type recent struct {
	max   int
	keep  time.Duration
	procs map[int]recentProc
}

type recentProc struct {
	g  *guard
	at time.Time
}

func newRecent(max int, keep time.Duration) *recent {
	return &recent{max: max, keep: keep, procs: map[int]recentProc{}}
}

func (r *recent) add(pid int, g *guard, now time.Time) {
	if len(r.procs) >= r.max {
		for p, rp := range r.procs {
			if now.Sub(rp.at) > r.keep || len(r.procs) >= r.max {
				delete(r.procs, p)
			}
		}
	}
	r.procs[pid] = recentProc{g, now}
}

func (r *recent) get(pid int, now time.Time) *guard {
	rp, ok := r.procs[pid]
	if !ok {
		return nil
	}
	if now.Sub(rp.at) > r.keep {
		delete(r.procs, pid)
		return nil
	}
	return rp.g
}

// current reports whether g is still the plan in force for its container.
func (p *Plugin) current(g *guard) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.guarded[g.id] == g
}

// guardOf finds the guarded container whose cgroup holds cg.
func (p *Plugin) guardOf(cg string) *guard {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.guarded) == 0 {
		return nil
	}
	return p.guarded[p.idAtLocked(cg)]
}
