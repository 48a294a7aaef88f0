package nriplugin

import (
	"context"
	"errors"
	"time"

	"github.com/oomguard/oomguard/internal/enforce"
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
	c, err := p.container(g, phase)
	if errors.Is(err, enforce.ErrNotContained) {
		return
	}
	if err == nil && p.mode == kernel.ModeV2 {
		err = p.verifyGroup(g, c, phase)
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
		return
	}
	p.mu.Lock()
	g.missing = 0
	p.mu.Unlock()
	if g.score != nil {
		switch n := p.enforceScore(g, c, phase); {
		case n > 0 && phase == "verify":
			p.m.drift.WithLabelValues("oom_score_adj").Add(float64(n))
			p.log.Info("drift corrected", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "processes", n, "oom_score_adj", *g.score)
		case n > 0 && phase == "start":
			// The runtime ignored the adjustment (containerd < 1.7.26 / 2.0, CRI-O < 1.32).
			p.log.Info("fixed after start", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "processes", n, "oom_score_adj", *g.score)
		}
	}
}

func (p *Plugin) verifyGroup(g *guard, c *enforce.Container, phase string) error {
	if ev, err := kernel.ReadMemoryEvents(p.root, p.mode, c.Cgroup()); err == nil {
		p.mu.Lock()
		kills := ev["oom_kill"] - min(g.oomKills, ev["oom_kill"])
		g.oomKills = max(g.oomKills, ev["oom_kill"])
		p.mu.Unlock()
		if kills > 0 {
			p.m.oomKills.Add(float64(kills))
			p.log.Warn("OOM kill in guarded container", "pod", g.namespace+"/"+g.pod, "container", g.name, "kills", kills)
		}
	}
	changed, old, err := p.enforceGroup(g, c, phase)
	if err != nil || !changed {
		return err
	}
	p.m.drift.WithLabelValues("oom_group").Inc()
	p.log.Info("drift corrected", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "oom_group", kernel.GroupValue(old)+"→"+kernel.GroupValue(*g.group))
	return nil
}

// enforceGroup writes the decided memory.oom.group when the cgroup holds
// another value, and says whether it did and what was there.
func (p *Plugin) enforceGroup(g *guard, c *enforce.Container, phase string) (changed, old bool, err error) {
	if g.group == nil || p.mode != kernel.ModeV2 {
		return false, false, nil
	}
	old, changed, err = c.Group(*g.group)
	if changed {
		p.m.adjustments.WithLabelValues("oom_group", phase).Inc()
	}
	return changed, old, err
}
