package nriplugin

import (
	"context"
	"errors"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/execwatch"
)

// execSource is the kernel's process events (execwatch), or a test's.
type execSource interface {
	Read(pids []int) ([]int, error)
	Close() error
}

func openExecs() (execSource, error) { return execwatch.Open() }

// watchExecs sets each process that execs in a guarded container to the
// container's score at once: a process exec'd into it (kubectl exec, an exec
// probe) starts at the score in its spec, which oomguard does not claim.
// Without the kernel's process events (no CAP_NET_ADMIN, another network
// namespace) the verifier still finds them.
func (p *Plugin) watchExecs(ctx context.Context, open func() (execSource, error)) {
	src, err := open()
	if err != nil {
		p.log.Warn("not watching execs; processes exec'd into guarded containers are set at the next verification", "err", err)
		return
	}
	go func() { <-ctx.Done(); src.Close() }()
	var pids []int
	for ctx.Err() == nil {
		pids, err = src.Read(pids[:0])
		switch {
		case errors.Is(err, execwatch.ErrLost):
			p.m.execLost.Inc()
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("watching execs failed; processes exec'd into guarded containers are set at the next verification", "err", err)
			}
			return
		}
		for _, pid := range pids {
			p.execd(pid)
		}
	}
}

// execd sets pid to its container's score if its container is guarded.
func (p *Plugin) execd(pid int) {
	n := p.node.Load()
	cg, err := n.Cgroup(pid)
	if err != nil {
		return // gone already, or not a process this node's view shows
	}
	g := p.guardOf(cg)
	if g == nil || g.plan.Score == nil {
		return
	}
	c, err := p.container(g, "exec")
	if err != nil {
		return
	}
	ch := c.Score(pid, *g.plan.Score)
	switch {
	case ch.What == enforce.Changed:
		p.m.adjustments.WithLabelValues(enforce.SettingScore, "exec").Inc()
		p.log.Debug("exec'd process set", g.attrs("pid", pid, enforce.SettingScore, ch.String())...)
	case ch.Err != nil && ch.What != enforce.Refused && !enforce.IsGone(ch.Err):
		p.m.errors.WithLabelValues("exec").Inc()
		p.log.Warn("setting an exec'd process failed", g.attrs("pid", pid, "err", ch.Err)...)
	}
}

// guardOf finds the guarded container whose cgroup holds cg.
func (p *Plugin) guardOf(cg string) *guard {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.guarded) == 0 {
		return nil
	}
	for _, id := range idsIn(cg) {
		if g := p.guarded[id]; g != nil {
			return g
		}
	}
	return nil
}
