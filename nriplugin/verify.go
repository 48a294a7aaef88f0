package nriplugin

import (
	"context"
	"time"

	"github.com/oomguard/oomguard/enforce"
	"github.com/oomguard/oomguard/internal/kernel"
)

// verifyLoop re-reads every guarded container each interval and corrects
// drift: a systemd daemon-reload can reset cgroup files, and a process can
// change its own score.
func (p *Plugin) verifyLoop(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.verifyAll()
		}
	}
}

func (p *Plugin) verifyAll() {
	p.mu.Lock()
	gs := make([]*guard, 0, len(p.guarded))
	for _, g := range p.guarded {
		gs = append(gs, g)
	}
	p.mu.Unlock()
	for _, g := range gs {
		p.verify(g, "verify")
	}
}

// verify corrects one container's group flag and scores, and counts the OOM
// kills the kernel reports in its cgroup.
func (p *Plugin) verify(g *guard, phase string) {
	cg, err := p.cgroup(g)
	if err == nil && p.mode == kernel.ModeV2 {
		err = p.verifyGroup(g, cg, phase)
	}
	if kernel.IsGone(err) {
		// Not started yet, or gone without a RemoveContainer we saw.
		p.mu.Lock()
		if g.missing++; g.missing > 3 {
			delete(p.guarded, g.id)
		}
		p.mu.Unlock()
		return
	}
	if err != nil {
		p.m.errors.WithLabelValues(phase).Inc()
		p.log.Warn("verifying container failed", "pod", g.namespace+"/"+g.pod, "container", g.name, "err", err)
	}
	g.missing = 0
	if g.score != nil {
		if n := p.enforceScore(g, phase); n > 0 && phase == "verify" {
			p.m.drift.WithLabelValues("oom_score_adj").Add(float64(n))
			p.log.Info("drift corrected", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "processes", n, "oom_score_adj", *g.score)
		}
	}
}

func (p *Plugin) verifyGroup(g *guard, cg, phase string) error {
	if ev, err := kernel.ReadMemoryEvents(p.root, p.mode, cg); err == nil {
		if k := ev["oom_kill"]; k > g.oomKills {
			p.m.oomKills.Add(float64(k - g.oomKills))
			p.log.Warn("OOM kill in guarded container", "pod", g.namespace+"/"+g.pod, "container", g.name, "kills", k-g.oomKills)
			g.oomKills = k
		}
	}
	changed, old, err := p.enforceGroup(g, cg, phase)
	if err != nil || !changed {
		return err
	}
	p.m.drift.WithLabelValues("oom_group").Inc()
	p.log.Info("drift corrected", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "oom_group", kernel.GroupValue(old)+"→"+kernel.GroupValue(*g.group))
	return nil
}

// enforceGroup writes the decided memory.oom.group when the cgroup holds
// another value, and says whether it did and what was there.
func (p *Plugin) enforceGroup(g *guard, cg, phase string) (changed, old bool, err error) {
	if g.group == nil || p.mode != kernel.ModeV2 {
		return false, false, nil
	}
	old, changed, err = enforce.Group(p.root, p.mode, cg, *g.group)
	if changed {
		p.m.adjustments.WithLabelValues("oom_group", phase).Inc()
	}
	return changed, old, err
}
