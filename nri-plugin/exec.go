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
	// Its goroutines end with it, when the source fails as when ctx ends.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { p.keepScored(ctx, filter); close(done) }()
	go func() { <-ctx.Done(); <-done; src.Close() }()
	set := newRecent(maxRecent, maxRecentPer, recentFor)
	var evs []execwatch.Event
	lost := newRescorer(p)
	defer lost.stop()
	sweep := newSweeper(p, sweepAfter)
	defer sweep.stop()
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
				if g := p.execd(e, set, forks, now); g != nil {
					sweep.soon(g)
				}
				continue
			}
			forks.add(e.Pid, e.Parent)
			g, ok := set.get(e.Parent, now)
			if !ok {
				continue
			}
			learnt := g == nil
			if learnt { // its parent had exited before its exec was read: the child says where it runs
				var exited bool
				if g, exited, _ = p.guardAt(e.Pid); g == nil {
					if exited {
						set.add(e.Pid, owner{by: e.Parent}, now)
					}
					continue
				}
			}
			if p.setProcess(g, e, "fork") {
				set.add(e.Pid, owner{g: g}, now)
				if learnt {
					sweep.soon(g)
				}
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
// forks, and its parent's, are looked up where they run. It returns the
// container it set the process in, or found it gone from.
func (p *Plugin) execd(e execwatch.Event, set *recent, forks *forkedBy, now time.Time) *guard {
	// Its parent now, and the one it was forked by (a runtime's exec hands
	// it to a subreaper when it exits): a CLONE_PARENT child names either.
	follow := func(o owner, ppid int) {
		for _, pp := range []int{ppid, forks.parent(e.Pid)} {
			if pp > 1 && !set.has(pp, now) {
				set.add(pp, o, now)
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
			o := owner{by: forks.parent(e.Pid)}
			if o.by == 0 {
				o.by = e.Pid
			}
			set.add(e.Pid, o, now)
			follow(o, ppid)
			return nil
		}
	}
	if g == nil || !p.setProcess(g, e, "exec") {
		return nil
	}
	set.add(e.Pid, owner{g: g}, now)
	ppid, _, _ := kernel.Parent(p.root, e.Pid)
	follow(owner{g: g}, ppid)
	return g
}

// guardAt is the guarded container the process runs in, by /proc: nil
// when none. exited: it is gone or exiting (exiting), and then ppid is
// its parent when its /proc still says.
func (p *Plugin) guardAt(pid int) (g *guard, exited bool, ppid int) {
	cg, err := p.node.Load().Cgroup(pid)
	switch {
	case enforce.IsGone(err):
		return nil, true, 0
	case err == nil && cg != "/":
		return p.guardOf(cg), false, 0
	}
	// The root cgroup, or a /proc that could not say: one exiting reads so.
	exited, ppid = p.exiting(pid)
	return nil, exited, ppid
}

// exiting reports whether the process is gone, a zombie or on its way to
// one (its /proc then shows the root cgroup), and its parent when /proc
// still says.
func (p *Plugin) exiting(pid int) (bool, int) {
	ppid, exited, err := kernel.Parent(p.root, pid)
	if err != nil {
		return enforce.IsGone(err), 0
	}
	return exited, ppid
}

// setProcess sets the event's process, one of g's container, to g's
// score; it reports whether its forks are to be followed: it changed the
// score, or the process is gone or exiting (what it forked before it
// exited has the spec's score too).
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
	case ch.What == enforce.Refused:
		// Exiting, it has left its cgroup: what it forked before is still the container's.
		exited, _ := p.exiting(pid)
		return exited
	case ch.Err != nil:
		p.m.errors.WithLabelValues("exec").Inc()
		p.log.Warn("setting an "+how+"'d process failed", g.attrs("pid", pid, "err", ch.Err)...)
	}
	return false
}

// current reports whether g is still the plan in force for its container.
func (p *Plugin) current(g *guard) bool { return p.reg.current(g) }

// guardOf finds the guarded container whose cgroup holds cg.
func (p *Plugin) guardOf(cg string) *guard { return p.reg.guardAt(cg) }
