package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
)

const unifiedOOMGroup = "memory.oom.group"

// plugin adjusts containers as the runtime creates them, keeps the setting
// through updates, fixes existing containers at Synchronize and re-asserts
// drift. Its handlers fail open: an error is logged and counted, and the
// container is created unadjusted, unless the configuration is strict.
type plugin struct {
	cfg  atomic.Pointer[config.Config]
	root string
	mode kernel.Mode
	log  *slog.Logger
	m    *metrics

	mu      sync.Mutex
	guarded map[string]*guard // by container ID
}

// guard is a container the policy changed, and what it must keep.
type guard struct {
	id, namespace, pod, name string
	cgroupsPath              string // from the OCI spec
	pid                      uint32
	rule                     string
	score                    *int
	group                    *bool
	seen                     time.Time
	oomKills                 uint64
	missing                  int // verifications that found no cgroup
}

func newPlugin(cfg *config.Config, root string, log *slog.Logger, m *metrics) *plugin {
	p := &plugin{root: root, mode: kernel.DetectMode(root), log: log, m: m, guarded: map[string]*guard{}}
	p.cfg.Store(cfg)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "oomguard_guarded_containers",
		Help: "Containers whose values oomguard keeps."}, func() float64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return float64(len(p.guarded))
	}))
	return p
}

// Configure takes the runtime's plugin configuration (/etc/nri/conf.d), when
// it has one, as the oomguard TOML configuration.
func (p *plugin) Configure(_ context.Context, cfgText, runtime, version string) (api.EventMask, error) {
	p.log.Info("connected to runtime", "runtime", runtime, "version", version, "cgroup", p.mode.String())
	if cfgText != "" {
		c, err := config.Parse([]byte(cfgText))
		if err != nil {
			p.m.errors.WithLabelValues("configure").Inc()
			p.log.Error("configuration from the runtime is invalid; keeping the current one", "err", err)
			if p.cfg.Load().Strict {
				return 0, err
			}
		} else {
			p.cfg.Store(c)
		}
	}
	return 0, nil // subscribe to every event the plugin implements
}

// Synchronize fixes the containers that already run: memory.oom.group through
// the runtime, oom_score_adj for every process in each container's cgroup.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) (updates []*api.ContainerUpdate, err error) {
	start := time.Now()
	defer p.failOpen("synchronize", &err)
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	fresh := map[string]*guard{}
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
		if g.group != nil {
			u := &api.ContainerUpdate{}
			u.SetContainerId(g.id)
			u.AddLinuxUnified(unifiedOOMGroup, kernel.GroupValue(*g.group))
			u.SetIgnoreFailure()
			updates = append(updates, u)
			p.m.adjustments.WithLabelValues("oom_group", "synchronize").Inc()
		}
		// Also at once: the runtime applies the update only after this reply.
		if cg, err := p.cgroup(g); err == nil {
			if _, _, err := p.enforceGroup(g, cg, "synchronize"); err != nil && !kernel.IsGone(err) {
				p.m.errors.WithLabelValues("synchronize").Inc()
				p.log.Warn("setting memory.oom.group failed", "container", g.name, "cgroup", cg, "err", err)
			}
		}
		if g.score != nil {
			if n := p.enforceScore(g, "synchronize"); n > 0 {
				p.log.Info("existing container fixed", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "processes", n, "oom_score_adj", *g.score)
			}
		}
	}
	p.mu.Lock()
	p.guarded = fresh
	p.mu.Unlock()
	p.m.setConnected(true)
	d := time.Since(start)
	p.m.syncDuration.Set(d.Seconds())
	p.log.Info("synchronized", "containers", len(ctrs), "guarded", len(fresh), "group_updates", len(updates), "duration", d.Round(time.Microsecond))
	return updates, nil
}

// CreateContainer puts the decision into the container's spec, so the
// runtime applies it before any of the container's processes runs.
func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (adj *api.ContainerAdjustment, upd []*api.ContainerUpdate, err error) {
	defer p.failOpen("create", &err)
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
	if dec.OOMGroup != nil {
		adj.AddLinuxUnified(unifiedOOMGroup, kernel.GroupValue(*dec.OOMGroup))
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
func (p *plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) (err error) {
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
func (p *plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (upd []*api.ContainerUpdate, err error) {
	defer p.failOpen("update", &err)
	p.mu.Lock()
	g := p.guarded[ctr.GetId()]
	p.mu.Unlock()
	if g == nil || g.group == nil {
		return nil, nil
	}
	want := kernel.GroupValue(*g.group)
	if got, ok := res.GetUnified()[unifiedOOMGroup]; ok && got != want {
		p.log.Info("update overridden", "pod", g.namespace+"/"+g.pod, "container", g.name, "rule", g.rule, "oom_group", got+"→"+want)
	}
	u := &api.ContainerUpdate{}
	u.SetContainerId(g.id)
	u.AddLinuxUnified(unifiedOOMGroup, want)
	p.m.adjustments.WithLabelValues("oom_group", "update").Inc()
	return []*api.ContainerUpdate{u}, nil
}

// RemoveContainer forgets the container.
func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.mu.Lock()
	delete(p.guarded, ctr.GetId())
	p.mu.Unlock()
	return nil
}

// Shutdown is the runtime going away; the run loop reconnects.
func (p *plugin) Shutdown(context.Context) {
	p.m.setConnected(false)
	p.log.Info("runtime is shutting down")
}

// failOpen turns a panic or an error into a log line and a counted failure;
// it lets the error through only when the configuration is strict.
func (p *plugin) failOpen(phase string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("panic: %v", r)
	}
	if *err == nil {
		return
	}
	p.m.errors.WithLabelValues(phase).Inc()
	if p.cfg.Load().Strict {
		p.log.Error(phase+" failed; strict mode: failing the request", "err", *err)
		return
	}
	p.log.Error(phase+" failed; container left unadjusted (fail open)", "err", *err)
	*err = nil
}

// decide runs the policy on what NRI tells about the container, and logs
// and counts the decision.
func (p *plugin) decide(phase string, pod *api.PodSandbox, ctr *api.Container) config.Decision {
	f := factsOf(pod, ctr)
	dec := p.cfg.Load().Decide(&f)
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
		"oom_group", change(f.OOMGroup, dec.OOMGroup, kernel.GroupValue), "reasons", dec.Reasons)
	return dec
}

// factsOf gathers the policy's facts from the pod and container NRI sends.
func factsOf(pod *api.PodSandbox, ctr *api.Container) config.Facts {
	ann := maps.Clone(pod.GetAnnotations())
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, ctr.GetAnnotations())
	f := config.Facts{
		Namespace:      pod.GetNamespace(),
		Pod:            pod.GetName(),
		Container:      ctr.GetName(),
		Image:          ctr.GetImage().GetName(),
		RuntimeHandler: pod.GetRuntimeHandler(),
		Labels:         pod.GetLabels(),
		Annotations:    ann,
		Args:           ctr.GetArgs(),
	}
	if f.Image == "" {
		f.Image = ann["io.kubernetes.cri.image-name"]
	}
	lin := ctr.GetLinux()
	if v := lin.GetOomScoreAdj(); v != nil {
		s := int(v.GetValue())
		f.OOMScoreAdj = &s
	}
	if v, ok := lin.GetResources().GetUnified()[unifiedOOMGroup]; ok {
		if b, err := strconv.ParseBool(v); err == nil {
			f.OOMGroup = &b
		}
	}
	f.QoS = config.InferQoS(pod.GetLinux().GetCgroupParent(), nil)
	if f.QoS == "" {
		f.QoS = config.InferQoS(lin.GetCgroupsPath(), f.OOMScoreAdj)
	}
	return f
}

func newGuard(pod *api.PodSandbox, ctr *api.Container, dec config.Decision) *guard {
	return &guard{
		id: ctr.GetId(), namespace: pod.GetNamespace(), pod: pod.GetName(), name: ctr.GetName(),
		cgroupsPath: ctr.GetLinux().GetCgroupsPath(), pid: ctr.GetPid(), rule: dec.Rule,
		score: dec.OOMScoreAdj, group: dec.OOMGroup, seen: time.Now(),
	}
}

// cgroup finds the container's cgroup: from its spec, which names it as the
// host sees it, else from its pid (whose /proc/PID/cgroup a cgroup namespace
// may show relative).
func (p *plugin) cgroup(g *guard) (string, error) {
	if g.cgroupsPath != "" {
		return kernel.ResolveCgroupsPath(g.cgroupsPath)
	}
	if g.pid != 0 {
		return kernel.ProcCgroup(p.root, p.mode, int(g.pid))
	}
	return "", errors.New("no cgroupsPath and no pid")
}

// enforceScore writes the decided score to every process of the container
// that does not have it, and returns how many it changed.
func (p *plugin) enforceScore(g *guard, phase string) int {
	cg, err := p.cgroup(g)
	if err != nil {
		p.log.Debug("no cgroup to fix scores in", "container", g.name, "err", err)
		return 0
	}
	pids, err := kernel.CgroupPids(p.root, p.mode, cg)
	if err != nil {
		if !kernel.IsGone(err) {
			p.m.errors.WithLabelValues(phase).Inc()
			p.log.Warn("listing processes failed", "container", g.name, "cgroup", cg, "err", err)
		}
		return 0
	}
	changed := 0
	for _, pid := range pids {
		cur, err := kernel.ReadOOMScoreAdj(p.root, pid)
		if err != nil || cur == *g.score {
			continue // a process that exited meanwhile
		}
		if err := kernel.WriteOOMScoreAdj(p.root, pid, *g.score); err != nil {
			if !kernel.IsGone(err) {
				p.m.errors.WithLabelValues(phase).Inc()
				p.log.Warn("setting oom_score_adj failed", "container", g.name, "pid", pid, "err", err)
			}
			continue
		}
		changed++
		p.m.adjustments.WithLabelValues("oom_score_adj", phase).Inc()
	}
	return changed
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
