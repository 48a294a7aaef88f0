package nriplugin

import (
	"fmt"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/podevents"
)

// Another writer of the same files (koordlet, another node agent, the
// process itself): a container whose score the verifier finds replaced at
// conflictAfter verifications in a row is in conflict, reported once; found
// replaced again at yieldAfter, oomguard leaves its score to the other
// writer rather than fight it for ever. It keeps its memory.oom.group.
const (
	conflictAfter = 2
	yieldAfter    = 3
)

// ConflictReason is the reason of the Event on a pod whose container's
// score another writer keeps changing.
const ConflictReason = "OOMScoreConflict"

// verifyScore sets the container's processes to its score again, and
// counts the verifications in a row that had to; the one that would yield
// only reads.
func (p *Plugin) verifyScore(g *guard, c *enforce.Container) {
	yield := p.cfg.Load().NRI.YieldToOtherWriters
	write := !yield || p.reg.drifts(g) < yieldAfter-1
	r := p.scores(g, c, "verify", write)
	if r.Differ == 0 {
		p.reg.steady(g)
		return
	}
	rounds := p.reg.drifted(g)
	if r.Changed > 0 {
		p.m.drift.WithLabelValues(enforce.SettingScore).Add(float64(r.Changed))
		p.log.Info("drift corrected", g.attrs("processes", r.Changed, "found", r.Found, enforce.SettingScore, *g.plan.Score)...)
	}
	switch {
	case rounds == conflictAfter:
		p.m.conflicts.Inc()
		p.log.Warn("another writer keeps changing the container's oom_score_adj; oomguard leaves it to them if it changes again (nri.yield_to_other_writers)",
			g.attrs("found", r.Found, enforce.SettingScore, *g.plan.Score, "verifications_in_a_row", rounds)...)
		if p.events != nil {
			p.events.Warning(podevents.Pod{Namespace: g.namespace, Name: g.pod, UID: p.reg.podUID(g)}, g.name, ConflictReason,
				fmt.Sprintf("oom_score_adj %d set by oomguard was found changed to %s at %d verifications in a row: another writer sets it; oomguard leaves it to that writer if it changes again", *g.plan.Score, r.Found, rounds))
		}
	case rounds >= yieldAfter && yield:
		ng, ok := p.reg.yield(g)
		if !ok {
			return
		}
		p.guardsChanged(g, ng)
		p.m.yielded.Inc()
		p.log.Warn("left the container's oom_score_adj to the other writer; it is kept again when the container is created again, the configuration changes or the plugin reconnects",
			g.attrs("found", r.Found, enforce.SettingScore, *g.plan.Score, "verifications_in_a_row", rounds)...)
	}
}
