package nriplugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/oomguard/oomguard/internal/escape"
	"github.com/oomguard/oomguard/internal/oomkills"
)

// Kill books stay in each record, under the registry's lock: one place, kept by a resync.

// Recorder records Events on pods (podevents.Recorder); one that has a
// Run(ctx) method, as that one does, is run beside the plugin.
type Recorder = oomkills.Recorder

// newKills is the node's kill reporter, reading p's registry.
func (p *Plugin) newKills() *oomkills.Reporter {
	return oomkills.New(oomkills.Options{Root: p.root, Node: p.node.Load, Containers: p.reg, Log: p.log, Metrics: p.m.oom,
		Events: p.events, Largest: p.logLargest, Synced: p.synced})
}

// watchKills reports the node's OOM kills from l, keeping its position
// beside the node's lock.
func (p *Plugin) watchKills(ctx context.Context, l oomkills.Log) {
	if p.lock != nil {
		l.Position = p.lock.dir
	}
	p.kills.Watch(ctx, l)
}

// largestTasks is how many of a container's processes a memcg kill's report lists.
const largestTasks = 5

// logLargest logs a guarded container's largest processes: the kernel's
// task dump, which the console fix turns off, for the one container.
func (p *Plugin) logLargest(id string) {
	g := p.reg.guard(id)
	if g == nil {
		return
	}
	c, err := p.container(g, "oom")
	if err != nil {
		return
	}
	procs, err := c.Largest(largestTasks)
	if err != nil || len(procs) == 0 {
		return
	}
	var b strings.Builder
	for i, pr := range procs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s %dkB oom_score_adj %d", pr.Pid, escape.Terminal(pr.Comm), pr.MemKB, pr.OOMScoreAdj)
	}
	p.log.Info("largest processes after the OOM kill", g.attrs("processes", b.String())...)
}

// Container is the container's names, cgroup and books, for the reporter.
func (r *registry) Container(id string) (oomkills.Container, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.byID[id]
	if !ok {
		return oomkills.Container{}, false
	}
	return rec.asContainer(), true
}

// At is the container whose cgroup holds cg (atLocked).
func (r *registry) At(cg string) (oomkills.Container, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.atLocked(cg); rec != nil {
		return rec.asContainer(), true
	}
	return oomkills.Container{}, false
}

// Counted are the containers whose kills are counted.
func (r *registry) Counted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, rec := range r.byID {
		if rec.books.Counted {
			ids = append(ids, id)
		}
	}
	return ids
}

// UpdateBooks runs f on the container's kill books under the lock; false
// when it has no record. f must not call the registry.
func (r *registry) UpdateBooks(id string, f func(*oomkills.Books)) bool {
	return r.update(id, func(rec *record) { f(&rec.books) })
}

// asContainer is the record as the reporter reads it; under the registry's lock.
func (rec *record) asContainer() oomkills.Container {
	i, g := rec.info, rec.guard
	return oomkills.Container{ID: rec.id, Namespace: i.namespace, Pod: i.pod, Name: i.name, PodUID: i.podUID,
		CgroupsPath: i.cgroupsPath, Pid: i.pid, KeptRunning: g != nil && g.plan.Group != nil && !*g.plan.Group, Books: rec.books}
}

var _ oomkills.Lookup = (*registry)(nil)
