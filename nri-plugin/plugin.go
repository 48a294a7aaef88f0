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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/facts"
	"github.com/oomguard/oomguard/internal/facts/nrifacts"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/policy"
)

// Plugin adjusts containers as the runtime creates them, keeps the setting
// through updates, fixes existing containers at Synchronize and re-asserts
// drift. Its handlers fail open: an error is logged and counted, and the
// container is created unadjusted, unless the configuration is strict.
type Plugin struct {
	cfg      atomic.Pointer[config.Config]
	unusable atomic.Pointer[error] // a strict configuration that cannot be used: fail closed
	runtime  atomic.Value          // string: the runtime connected, a facts.Runtime name
	root     string
	mode     kernel.Mode
	log      *slog.Logger
	m        *Metrics

	mu      sync.Mutex
	guarded map[string]*guard // by container ID
}

// guard is a container the policy changed, and what it must keep. Its
// fields below mu are changed by PostStartContainer and the verifier at
// once, and are only touched under the plugin's lock.
type guard struct {
	id, namespace, pod, name string
	cgroupsPath              string // from the OCI spec
	rule                     string
	score                    *int
	group                    *bool

	// under Plugin.mu
	pid      uint32
	oomKills uint64
	missing  int // verifications that found no cgroup
}

// New makes a plugin with cfg until the runtime passes another; root is the
// host's filesystem root holding /proc and /sys. cfgErr is why the
// configuration could not be read, if it could not: when that file asked for
// strict mode, the plugin fails every container's creation until the runtime
// passes a usable configuration.
func New(cfg *config.Config, cfgErr error, root string, log *slog.Logger, m *Metrics) *Plugin {
	p := &Plugin{root: root, mode: kernel.DetectMode(root), log: log, m: m, guarded: map[string]*guard{}}
	p.cfg.Store(cfg)
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

// Configure takes the runtime's plugin configuration (/etc/nri/conf.d), when
// it has one, as the oomguard TOML configuration. A configuration that does
// not validate is not taken; if it (or the one in force) asks for strict
// mode, containers fail to be created until a usable one comes.
func (p *Plugin) Configure(_ context.Context, cfgText, runtime, version string) (api.EventMask, error) {
	p.runtime.Store(facts.RuntimeNamed(runtime))
	p.log.Info("connected to runtime", "runtime", runtime, "version", version, "cgroup", p.mode.String())
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
			p.cfg.Store(c)
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
		dec := p.decide("synchronize", pod, ctr)
		if !dec.Changes() {
			continue
		}
		g := newGuard(pod, ctr, dec)
		fresh[g.id] = g
		c, err := p.container(g, "synchronize")
		if err != nil {
			continue
		}
		fixes = append(fixes, fix{g, c})
		if g.group != nil && p.mode == kernel.ModeV2 {
			u := &api.ContainerUpdate{}
			u.SetContainerId(g.id)
			u.AddLinuxUnified(facts.UnifiedOOMGroup, kernel.GroupValue(*g.group))
			u.SetIgnoreFailure()
			updates = append(updates, u)
			p.m.adjustments.WithLabelValues("oom_group", "synchronize").Inc()
		}
	}
	p.mu.Lock()
	p.guarded = fresh
	p.mu.Unlock()
	p.m.setConnected(true)
	// The runtime drops a plugin that answers late (CRI-O and containerd
	// allow 2 s): the processes are fixed after the reply, not before it.
	go func(groupUpdates int) {
		var err error
		defer p.failOpen("synchronize", &err) // a panic here must not take the plugin down
		for _, f := range fixes {
			g, c := f.g, f.c
			if g.group != nil && p.mode == kernel.ModeV2 {
				// Also directly: the runtime applies its update only when it gets to it.
				if _, _, err := p.enforceGroup(g, c, "synchronize"); err != nil && !kernel.IsGone(err) {
					p.m.errors.WithLabelValues("synchronize").Inc()
					p.log.Warn("setting memory.oom.group failed", "container", g.name, "cgroup", c.Cgroup(), "err", err)
				}
			}
			if g.score != nil {
				if n := p.enforceScore(g, c, "synchronize"); n > 0 {
					p.log.Info("existing container fixed", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "processes", n, "oom_score_adj", *g.score)
				}
			}
		}
		d := time.Since(start)
		p.m.syncDuration.Set(d.Seconds())
		p.log.Info("synchronized", "containers", len(ctrs), "guarded", len(fresh), "group_updates", groupUpdates, "duration", d.Round(time.Microsecond))
	}(len(updates))
	return updates, nil
}

// CreateContainer puts the decision into the container's spec, so the
// runtime applies it before any of the container's processes runs.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (adj *api.ContainerAdjustment, upd []*api.ContainerUpdate, err error) {
	defer p.failOpen("create", &err)
	if e := p.unusable.Load(); e != nil {
		return nil, nil, *e
	}
	dec := p.decide("create", pod, ctr)
	if !dec.Changes() {
		return nil, nil, nil
	}
	adj = &api.ContainerAdjustment{}
	if dec.OOMScoreAdj != nil {
		v := *dec.OOMScoreAdj
		adj.SetLinuxOomScoreAdj(&v)
		p.m.adjustments.WithLabelValues("oom_score_adj", "create").Inc()
	}
	// Never a setting the node cannot apply: runc refuses unified resources on cgroup v1.
	if dec.OOMGroup != nil && p.mode == kernel.ModeV2 {
		adj.AddLinuxUnified(facts.UnifiedOOMGroup, kernel.GroupValue(*dec.OOMGroup))
		p.m.adjustments.WithLabelValues("oom_group", "create").Inc()
	}
	g := newGuard(pod, ctr, dec)
	p.mu.Lock()
	p.guarded[g.id] = g
	p.mu.Unlock()
	return adj, nil, nil
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
	if g == nil || g.group == nil || p.mode != kernel.ModeV2 {
		return nil, nil
	}
	want := kernel.GroupValue(*g.group)
	if got, ok := res.GetUnified()[facts.UnifiedOOMGroup]; ok && got != want {
		p.log.Info("update overridden", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "oom_group", got+"→"+want)
	}
	u := &api.ContainerUpdate{}
	u.SetContainerId(g.id)
	u.AddLinuxUnified(facts.UnifiedOOMGroup, want)
	p.m.adjustments.WithLabelValues("oom_group", "update").Inc()
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

// decide runs the policy on what NRI tells about the container, and logs
// and counts the decision.
func (p *Plugin) decide(phase string, pod *api.PodSandbox, ctr *api.Container) policy.Decision {
	f := nrifacts.FromNRI(pod, ctr, p.runtime.Load().(string))
	dec := p.cfg.Load().Policy().Decide(&f)
	for _, r := range dec.Rejected {
		p.m.rejections.Inc()
		p.log.Warn("annotation rejected", "pod", f.Namespace+"/"+f.Pod, "container", f.Container, "key", r.Key, "value", r.Value, "reason", r.Reason)
	}
	if !dec.Changes() {
		p.log.Debug("decision", "phase", phase, "pod", f.Namespace+"/"+f.Pod, "container", f.Container, "rule", dec.Rule, "reasons", dec.Reasons)
		return dec
	}
	p.m.decisions.WithLabelValues(dec.Rule).Inc()
	p.log.Info("decision", "phase", phase, "pod", f.Namespace+"/"+f.Pod, "container", f.Container, "rule", dec.Rule,
		"oom_score_adj", change(f.OOMScoreAdj, dec.OOMScoreAdj, strconv.Itoa),
		"oom_group", p.groupChange(f.OOMGroup, dec.OOMGroup), "reasons", dec.Reasons)
	return dec
}

func newGuard(pod *api.PodSandbox, ctr *api.Container, dec policy.Decision) *guard {
	return &guard{
		id: ctr.GetId(), namespace: pod.GetNamespace(), pod: pod.GetName(), name: ctr.GetName(),
		cgroupsPath: ctr.GetLinux().GetCgroupsPath(), pid: ctr.GetPid(), rule: dec.Rule,
		score: dec.OOMScoreAdj, group: dec.OOMGroup,
	}
}

// container is the container's own cgroup, checked to be one container's:
// the one its spec names, as the host sees it, else its init's. A path
// outside every container is refused, logged and counted.
func (p *Plugin) container(g *guard, phase string) (*enforce.Container, error) {
	p.mu.Lock()
	pid := g.pid
	p.mu.Unlock()
	var cg string
	var err error
	switch {
	case g.cgroupsPath != "":
		cg, err = kernel.ResolveCgroupsPath(g.cgroupsPath)
	case pid != 0 && kernel.CgroupNSDepth(p.root, p.mode) == 0:
		cg, err = kernel.ProcCgroup(p.root, p.mode, int(pid))
	default:
		return nil, errors.New("no cgroupsPath, and no pid whose cgroup the host's namespace shows")
	}
	if err != nil {
		return nil, err
	}
	c, err := enforce.Contain(p.root, p.mode, cg, p.cfg.Load().Containment.CgroupParents)
	if err != nil {
		p.m.refusals.WithLabelValues(phase).Inc()
		p.log.Warn("refusing to write outside a container", "pod", g.namespace+"/"+g.pod, "container", g.name, "phase", phase, "err", err)
	}
	return c, err
}

// enforceScore writes the decided score to every process of the container
// that does not have it, and returns how many it changed.
func (p *Plugin) enforceScore(g *guard, c *enforce.Container, phase string) int {
	changed, errs := c.Scores(*g.score)
	for _, err := range errs {
		p.m.errors.WithLabelValues(phase).Inc()
		p.log.Warn("setting oom_score_adj failed", "container", g.name, "cgroup", c.Cgroup(), "err", err)
	}
	p.m.adjustments.WithLabelValues("oom_score_adj", phase).Add(float64(changed))
	return changed
}

// groupChange says what the decision does to memory.oom.group, for the log.
func (p *Plugin) groupChange(old, new *bool) string {
	if new != nil && p.mode != kernel.ModeV2 {
		return "unsupported (cgroup " + p.mode.String() + " node)"
	}
	return change(old, new, kernel.GroupValue)
}

func change[T any](old, new *T, format func(T) string) string {
	if new == nil {
		return "left"
	}
	o := "unset"
	if old != nil {
		o = format(*old)
	}
	return o + "→" + format(*new)
}
