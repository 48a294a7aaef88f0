package nriplugin

import (
	"context"
	"errors"
	"hash/fnv"
	"time"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/kernel"
)

// verifyLoop re-reads every guarded container each interval and corrects
// drift: a systemd daemon-reload can reset cgroup files, and a process can
// change its own score. The interval is cut into turns (see rotation), and
// each tick verifies the containers whose turn it is: the node pays a
// slice of the pass every tick, not every container at once.
func (p *Plugin) verifyLoop(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	r := newRotation(interval, time.Now()) // before the ticker: no tick comes early for it
	p.reg.rotate(r.turns)
	defer p.reg.rotate(0)
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, turn := range r.due(now) {
				p.verifyTurn(turn)
			}
		}
	}
}

// verifyTurn verifies the guarded containers whose turn it is.
func (p *Plugin) verifyTurn(turn int) {
	for _, g := range p.reg.turnGuards(turn) {
		p.verify(g, "verify")
	}
}

// maxTurns bounds the turns an interval is cut into; a turn lasts a
// second at least. With the shipped 60 s, a second each: 2,000 containers
// are 33 or so a second.
const maxTurns = 60

// rotation is the verifier's schedule: the interval cut into turns, and
// each container verified at its own turn (turnOf its ID, the same every
// interval), so that it is verified once an interval, at even spaces, and
// one that joins within an interval of joining; one that leaves is no
// longer there to verify. Turns follow the clock from start: a late tick
// (a slow turn, a stopped process) verifies the turns it passed, each
// once, never more than a whole interval's.
type rotation struct {
	turns int
	tick  time.Duration // interval / turns
	start time.Time
	done  int // turns verified since start
}

func newRotation(interval time.Duration, start time.Time) *rotation {
	turns := int(min(max(interval/time.Second, 1), maxTurns))
	return &rotation{turns: turns, tick: interval / time.Duration(turns), start: start}
}

// due are the turns whose time came since the last call, in order.
func (r *rotation) due(now time.Time) []int {
	upTo := int(now.Sub(r.start) / r.tick)
	var turns []int
	for n := max(r.done, upTo-r.turns); n < upTo; n++ {
		turns = append(turns, n%r.turns)
	}
	r.done = max(r.done, upTo)
	return turns
}

// turnOf is a container's place in the rotation, from its ID (FNV-1a):
// the containers of a node spread evenly over the turns, each at the same
// turn all its life.
func turnOf(id string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()
}

// turnIn is which of turns a container of turnOf h has: from the hash's
// high bits, FNV's best mixed.
func turnIn(h uint32, turns int) int { return int(uint64(h) * uint64(turns) >> 32) }

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
	if err == nil && g.plan.Group != nil {
		err = p.verifyGroup(g, c, phase)
	}
	if err == nil { // after the group: a cgroup gone is one read, not two
		p.countKills(g, c)
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
	if g.plan.Score == nil {
		return
	}
	if phase != "verify" {
		if n, _ := p.enforceScore(g, c, phase); n > 0 && phase == "update" {
			p.log.Info("set again after an update", g.attrs("processes", n, enforce.SettingScore, *g.plan.Score)...)
		}
		return
	}
	p.verifyScore(g, c)
}

// countKills counts the OOM kills memory.events reports since the last look
// (cgroup v2 only: on v1 nothing is read).
func (p *Plugin) countKills(g *guard, c *enforce.Container) {
	if p.node.Load().Mode() != kernel.ModeV2 {
		return
	}
	n, err := c.OOMKills()
	if err != nil {
		return
	}
	if kills := p.reg.killsSeen(g, n); kills > 0 {
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
