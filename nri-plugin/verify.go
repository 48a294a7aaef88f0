package nriplugin

import (
	"context"
	"errors"
	"time"

	"github.com/oomguard/oomguard/internal/enforce"
)

// verifyLoop re-reads every guarded container each interval and corrects
// drift: a systemd daemon-reload can reset cgroup files, and a process can
// change its own score.
func (p *Plugin) verifyLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, p.verifyAll)
}

// every calls f each interval until ctx ends; never when interval is 0.
func every(ctx context.Context, interval time.Duration, f func()) {
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
			f()
		}
	}
}

func (p *Plugin) verifyAll() {
	for _, g := range p.reg.guards() {
		p.verify(g, "verify")
	}
}

// verify corrects one container's group flag and scores, and counts the OOM
// kills the kernel reports in its cgroup.
func (p *Plugin) verify(g *guard, phase string) {
	if !p.current(g) { // a reload replaced or dropped it: its plan is not in force
		return
	}
	c, err := p.container(g, phase)
	if errors.Is(err, enforce.ErrNotContained) {
		return
	}
	if err == nil {
		p.countKills(g, c)
	}
	if err == nil && g.plan.Group != nil {
		err = p.verifyGroup(g, c, phase)
	}
	if enforce.IsGone(err) {
		// Not started yet, or gone without a RemoveContainer we saw.
		if p.reg.missed(g) {
			p.guardsChanged(g)
		}
		return
	}
	if err != nil {
		p.m.errors.WithLabelValues(phase).Inc()
		p.log.Warn("verifying container failed", g.attrs("err", err)...)
		return
	}
	p.reg.seen(g)
	if g.plan.Score != nil {
		switch n, _ := p.enforceScore(g, c, phase); {
		case n > 0 && phase == "verify":
			p.m.drift.WithLabelValues(enforce.SettingScore).Add(float64(n))
			p.log.Info("drift corrected", g.attrs("processes", n, enforce.SettingScore, *g.plan.Score)...)
		case n > 0 && phase == "update":
			p.log.Info("set again after an update", g.attrs("processes", n, enforce.SettingScore, *g.plan.Score)...)
		}
	}
}

// countKills counts the OOM kills memory.events reports since the last look
// (cgroup v2 only).
func (p *Plugin) countKills(g *guard, c *enforce.Container) {
	ev, err := c.MemoryEvents()
	if err != nil {
		return
	}
	if kills := p.reg.killsSeen(g, ev["oom_kill"]); kills > 0 {
		p.m.oomKills.Add(float64(kills))
		p.log.Warn("OOM kill in guarded container", g.attrs("kills", kills)...)
	}
}

func (p *Plugin) verifyGroup(g *guard, c *enforce.Container, phase string) error {
	ch := p.enforceGroup(g, c, phase)
	if ch.Err != nil || ch.What != enforce.Changed {
		return ch.Err
	}
	if phase == "update" {
		p.log.Info("set again after an update", g.attrs(enforce.SettingGroup, ch.String())...)
		return nil
	}
	p.m.drift.WithLabelValues(enforce.SettingGroup).Inc()
	p.log.Info("drift corrected", g.attrs(enforce.SettingGroup, ch.String())...)
	return nil
}

// enforceGroup writes the planned memory.oom.group when the cgroup holds
// another value.
func (p *Plugin) enforceGroup(g *guard, c *enforce.Container, phase string) enforce.Change {
	ch := c.Group(*g.plan.Group)
	if ch.What == enforce.Changed {
		p.m.adjustments.WithLabelValues(enforce.SettingGroup, phase).Inc()
	}
	return ch
}
