// Package nriplugin is oomguard-nri's work: an NRI plugin for containerd
// (≥ 1.7) and CRI-O (≥ 1.26) that makes the runtime create the containers
// the oomguard policy selects with the right oom_score_adj and
// memory.oom.group, keeps them so, and fixes the containers that already ran
// when it started.
package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/facts"
	"github.com/oomguard/oomguard/internal/facts/nrifacts"
)

// Plugin adjusts containers as the runtime creates them, keeps the setting
// through updates, fixes existing containers at Synchronize and re-asserts
// drift. Its handlers fail open: an error is logged and counted, and the
// container is created unadjusted, unless the configuration is strict.
type Plugin struct {
	cfg      atomic.Pointer[config.Config]
	node     atomic.Pointer[enforce.Node] // the node as cfg's containment sees it
	unusable atomic.Pointer[error]        // a strict configuration that cannot be used: fail closed
	runtime  atomic.Value                 // string: the runtime connected, a facts.Runtime name
	root     string
	log      *slog.Logger
	m        *Metrics

	mu      sync.Mutex
	guarded map[string]*guard // by container ID

	background sync.WaitGroup // Synchronize's fixes, after its reply
}

// guard is a container the policy changed, and what it must keep. Its
// fields below mu are changed by PostStartContainer and the verifier at
// once, and are only touched under the plugin's lock.
type guard struct {
	id, namespace, pod, name string
	plan                     enforce.Plan

	// under Plugin.mu
	cgroupsPath string // from the OCI spec, else the cgroup its pid was first found in
	pid         uint32
	oomKills    uint64
	missing     int // verifications that found no cgroup
}

// attrs are a container's fields for a log line.
func (g *guard) attrs(more ...any) []any {
	return append([]any{"pod", g.namespace + "/" + g.pod, "container", g.name, "rule", g.plan.Rule}, more...)
}

// New makes a plugin with cfg until the runtime passes another; root is the
// host's filesystem root holding /proc and /sys. cfgErr is why the
// configuration could not be read, if it could not: when that file asked for
// strict mode, the plugin fails every container's creation until the runtime
// passes a usable configuration.
func New(cfg *config.Config, cfgErr error, root string, log *slog.Logger, m *Metrics) *Plugin {
	p := &Plugin{root: root, log: log, m: m, guarded: map[string]*guard{}}
	p.setConfig(cfg)
	p.runtime.Store(facts.RuntimeUnknown)
	var le *config.LoadError
	if errors.As(cfgErr, &le) && le.Strict {
		p.unusable.Store(&cfgErr)
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "oomguard_guarded_containers",
		Help: "Containers whose values oomguard keeps."}, func() float64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return float64(len(p.guarded))
	}))
	return p
}

func (p *Plugin) setConfig(cfg *config.Config) {
	p.node.Store(enforce.NewNode(p.root, cfg.Containment.CgroupParents))
	p.cfg.Store(cfg)
}

// Configure takes the runtime's plugin configuration (/etc/nri/conf.d), when
// it has one, as the oomguard TOML configuration. A configuration that does
// not validate is not taken; if it (or the one in force) asks for strict
// mode, containers fail to be created until a usable one comes.
func (p *Plugin) Configure(_ context.Context, cfgText, runtime, version string) (api.EventMask, error) {
	p.runtime.Store(facts.RuntimeNamed(runtime))
	p.log.Info("connected to runtime", "runtime", runtime, "version", version, "cgroup", p.node.Load().Layout())
	if cfgText != "" {
		c, err := config.Parse([]byte(cfgText))
		if err != nil {
			p.m.errors.WithLabelValues("configure").Inc()
			err = fmt.Errorf("configuration from the runtime: %w", err)
			if p.cfg.Load().Strict || config.StrictIn([]byte(cfgText)) {
				p.log.Error("configuration is unusable; strict mode: every container's creation fails until it is fixed", "err", err)
				p.unusable.Store(&err)
				return 0, nil
			}
			p.log.Error("configuration from the runtime is invalid; keeping the current one", "err", err)
		} else {
			p.setConfig(c)
			p.unusable.Store(nil)
		}
	}
	return 0, nil // subscribe to every event the plugin implements
}

// Synchronize fixes the containers that already run: memory.oom.group through
// the runtime, oom_score_adj for every process in each container's cgroup
// (after the reply; "synchronized" is logged when that is done).
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) (updates []*api.ContainerUpdate, err error) {
	start := time.Now()
	defer p.failOpen("synchronize", &err)
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	fresh := map[string]*guard{}
	type fix struct {
		g *guard
		c *enforce.Container
	}
	var fixes []fix
	for _, ctr := range ctrs {
		if s := ctr.GetState(); s == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		pod := byID[ctr.GetPodSandboxId()]
		g := p.decide("synchronize", pod, ctr)
		if g == nil {
			continue
		}
		fresh[g.id] = g
		c, err := p.container(g, "synchronize")
		if err != nil {
			continue
		}
		fixes = append(fixes, fix{g, c})
		if u := groupUpdate(g); u != nil {
			updates = append(updates, u)
			p.m.adjustments.WithLabelValues(enforce.SettingGroup, "synchronize").Inc()
		}
	}
	p.mu.Lock()
	p.guarded = fresh
	p.mu.Unlock()
	p.m.setConnected(true)
	// The runtime drops a plugin that answers late (CRI-O and containerd
	// allow 2 s): the processes are fixed after the reply, not before it.
	// The counts are taken now: fresh is the handlers' map from here on.
	containers, guarded := len(ctrs), len(fresh)
	p.background.Add(1)
	go func(groupUpdates int) {
		defer p.background.Done()
		var err error
		defer p.failOpen("synchronize", &err) // a panic here must not take the plugin down
		for _, f := range fixes {
			g, c := f.g, f.c
			if g.plan.Group != nil {
				// Also directly: the runtime applies its update only when it gets to it.
				if ch := p.enforceGroup(g, c, "synchronize"); ch.Err != nil && !enforce.IsGone(ch.Err) {
					p.m.errors.WithLabelValues("synchronize").Inc()
					p.log.Warn("setting memory.oom.group failed", g.attrs("cgroup", c.Cgroup(), "err", ch.Err)...)
				}
			}
			if g.plan.Score != nil {
				if n := p.enforceScore(g, c, "synchronize"); n > 0 {
					p.log.Info("existing container fixed", g.attrs("processes", n, "oom_score_adj", *g.plan.Score)...)
				}
			}
		}
		d := time.Since(start)
		p.m.syncDuration.Set(d.Seconds())
		p.log.Info("synchronized", "containers", containers, "guarded", guarded, "group_updates", groupUpdates, "duration", d.Round(time.Microsecond))
	}(len(updates))
	return updates, nil
}

// waitBackground waits for Synchronize's fixes to be done.
func (p *Plugin) waitBackground() { p.background.Wait() }

// CreateContainer puts the plan into the container's spec, so the runtime
// applies it before any of the container's processes runs.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (adj *api.ContainerAdjustment, upd []*api.ContainerUpdate, err error) {
	defer p.failOpen("create", &err)
	if e := p.unusable.Load(); e != nil {
		return nil, nil, *e
	}
	g := p.decide("create", pod, ctr)
	if g == nil {
		return nil, nil, nil
	}
	adj = adjustment(g.plan)
	if g.plan.Score != nil {
		p.m.adjustments.WithLabelValues(enforce.SettingScore, "create").Inc()
	}
	if g.plan.Group != nil {
		p.m.adjustments.WithLabelValues(enforce.SettingGroup, "create").Inc()
	}
	p.mu.Lock()
	p.guarded[g.id] = g
	p.mu.Unlock()
	return adj, nil, nil
}

// adjustment is the plan as NRI carries it to the runtime: the score, and
// the group as a unified cgroup resource (only in a plan for cgroup v2,
// since runc refuses unified resources on v1). Nil when the plan sets nothing.
func adjustment(plan enforce.Plan) *api.ContainerAdjustment {
	if !plan.Changes() {
		return nil
	}
	adj := &api.ContainerAdjustment{}
	if plan.Score != nil {
		v := *plan.Score
		adj.SetLinuxOomScoreAdj(&v)
	}
	if plan.Group != nil {
		adj.AddLinuxUnified(facts.UnifiedOOMGroup, enforce.GroupValue(*plan.Group))
	}
	return adj
}

// groupUpdate asks the runtime to set a guarded container's group again, nil
// when its plan leaves the group alone.
func groupUpdate(g *guard) *api.ContainerUpdate {
	if g.plan.Group == nil {
		return nil
	}
	u := &api.ContainerUpdate{}
	u.SetContainerId(g.id)
	u.AddLinuxUnified(facts.UnifiedOOMGroup, enforce.GroupValue(*g.plan.Group))
	u.SetIgnoreFailure()
	return u
}

// PostStartContainer checks the started container at once: runtimes older
// than containerd 2.0 and CRI-O 1.32 ignore an adjusted oom_score_adj.
func (p *Plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) (err error) {
	defer p.failOpen("start", &err)
	p.mu.Lock()
	g := p.guarded[ctr.GetId()]
	if g != nil && ctr.GetPid() != 0 {
		g.pid = ctr.GetPid()
	}
	p.mu.Unlock()
	if g != nil {
		p.verify(g, "start")
	}
	return nil
}

// UpdateContainer keeps memory.oom.group as decided: kubelet re-sends
// memory.oom.group = 1 with every resize.
func (p *Plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (upd []*api.ContainerUpdate, err error) {
	defer p.failOpen("update", &err)
	p.mu.Lock()
	g := p.guarded[ctr.GetId()]
	p.mu.Unlock()
	if g == nil || g.plan.Group == nil {
		return nil, nil
	}
	want := enforce.GroupValue(*g.plan.Group)
	if got, ok := res.GetUnified()[facts.UnifiedOOMGroup]; ok && got != want {
		ch := enforce.Change{Setting: enforce.SettingGroup, From: got, To: want, What: enforce.Planned}
		p.log.Info("update overridden", g.attrs(enforce.SettingGroup, ch.String())...)
	}
	u := groupUpdate(g)
	u.IgnoreFailure = false
	p.m.adjustments.WithLabelValues(enforce.SettingGroup, "update").Inc()
	return []*api.ContainerUpdate{u}, nil
}

// RemoveContainer forgets the container.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.mu.Lock()
	delete(p.guarded, ctr.GetId())
	p.mu.Unlock()
	return nil
}

// Shutdown is the runtime going away; the run loop reconnects.
func (p *Plugin) Shutdown(context.Context) {
	p.m.setConnected(false)
	p.log.Info("runtime is shutting down")
}

// failOpen turns a panic or an error into a log line and a counted failure;
// it lets the error through only when the configuration is strict.
func (p *Plugin) failOpen(phase string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("panic: %v", r)
	}
	if *err == nil {
		return
	}
	p.m.errors.WithLabelValues(phase).Inc()
	if p.cfg.Load().Strict || p.unusable.Load() != nil {
		p.log.Error(phase+" failed; strict mode: failing the request", "err", *err)
		return
	}
	p.log.Error(phase+" failed; container left unadjusted (fail open)", "err", *err)
	*err = nil
}

// decide runs the policy on what NRI tells about the container, masks it
// against what the node supports, logs and counts it, and returns the
// container to guard; nil when the plan changes nothing.
func (p *Plugin) decide(phase string, pod *api.PodSandbox, ctr *api.Container) *guard {
	f := nrifacts.FromNRI(pod, ctr, p.runtime.Load().(string))
	dec := p.cfg.Load().Policy().Decide(&f)
	ids := []any{"pod", f.Namespace + "/" + f.Pod, "container", f.Container}
	for _, r := range dec.Rejected {
		p.m.rejections.Inc()
		p.log.Warn("annotation rejected", append(ids, "key", r.Key, "value", r.Value, "reason", r.Reason)...)
	}
	plan := p.node.Load().Plan(dec)
	if !dec.Changes() {
		p.log.Debug("decision", append([]any{"phase", phase}, append(ids, "rule", dec.Rule, "reasons", dec.Reasons)...)...)
		return nil
	}
	p.m.decisions.WithLabelValues(dec.Rule).Inc()
	p.log.Info("decision", append([]any{"phase", phase}, append(ids, "rule", dec.Rule,
		enforce.SettingScore, plan.ScoreChange(f.OOMScoreAdj).String(),
		enforce.SettingGroup, plan.GroupChange(f.OOMGroup).String(), "reasons", dec.Reasons)...)...)
	if !plan.Changes() {
		return nil
	}
	return &guard{
		id: ctr.GetId(), namespace: pod.GetNamespace(), pod: pod.GetName(), name: ctr.GetName(),
		cgroupsPath: ctr.GetLinux().GetCgroupsPath(), pid: ctr.GetPid(), plan: plan,
	}
}

// container is the container's own cgroup, as Locate finds and checks it.
// One found by its pid is kept: once the container's init exits, its pid
// can be another container's. A path outside every container is refused,
// logged and counted.
func (p *Plugin) container(g *guard, phase string) (*enforce.Container, error) {
	p.mu.Lock()
	pid, cgroupsPath := g.pid, g.cgroupsPath
	p.mu.Unlock()
	c, err := p.node.Load().Locate(cgroupsPath, int(pid))
	if err == nil && cgroupsPath == "" {
		p.mu.Lock()
		g.cgroupsPath = c.Cgroup()
		p.mu.Unlock()
	}
	if errors.Is(err, enforce.ErrNotContained) {
		p.m.refusals.WithLabelValues(phase).Inc()
		p.log.Warn("refusing to write outside a container", g.attrs("phase", phase, "err", err)...)
	}
	return c, err
}

// enforceScore writes the planned score to every process of the container
// that does not have it, and returns how many it changed.
func (p *Plugin) enforceScore(g *guard, c *enforce.Container, phase string) int {
	changed, errs := c.Scores(*g.plan.Score)
	for _, err := range errs {
		p.m.errors.WithLabelValues(phase).Inc()
		p.log.Warn("setting oom_score_adj failed", g.attrs("cgroup", c.Cgroup(), "err", err)...)
	}
	p.m.adjustments.WithLabelValues(enforce.SettingScore, phase).Add(float64(changed))
	return changed
}
