// Package nriplugin is oomguard-nri's work: an NRI plugin for containerd
// (≥ 1.7) and CRI-O (≥ 1.26) that gives the containers the oomguard policy
// selects the right oom_score_adj and memory.oom.group before their first
// process runs, keeps them so (resizes, processes exec'd into them, drift),
// and fixes the containers that already ran when it started. It claims no
// field through NRI, so no other plugin's adjustment can make a container
// fail over it.
package nriplugin

import (
	"cmp"
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
	"github.com/oomguard/oomguard/internal/oomkills"
	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/internal/score"
)

// Plugin sets containers before they start, keeps the setting through
// updates and execs, fixes existing containers at Synchronize, re-asserts
// drift and reports the OOM kills on the node. Its handlers fail open: an
// error is logged and counted, and the container starts as kubelet asked,
// unless the configuration is strict.
type Plugin struct {
	cfg      atomic.Pointer[config.Config]
	pol      atomic.Pointer[policy.Policy] // cfg's, compiled
	node     atomic.Pointer[enforce.Node]  // the node as cfg's containment sees it
	unusable atomic.Pointer[error]         // a strict configuration that cannot be used: fail closed
	runtime  atomic.Value                  // string: the runtime connected, a facts.Runtime name
	o        Options
	nri      config.NRI // the connection's and loops' settings, fixed at the start
	root     string
	log      *slog.Logger
	m        *Metrics
	// capacity is the node's memory as kubelet takes it (MemTotal), the
	// score formulas' capacity; unknown when /proc/meminfo cannot tell.
	capacity score.Input

	reg *registry // the containers the runtime told of (registry.go)

	background sync.WaitGroup     // work run after a handler's reply (afterReply)
	kills      *oomkills.Reporter // the node's OOM kill reports (kills.go)
	scored     *scored            // the guarded containers with a score (scored.go)
	execs      func() (execSource, error)
	kmsg       func(oldest bool) (oomkills.Source, error)
	events     Recorder // nil: no Events

	// The node's lock (lead.go): nil where it cannot be had, and then this
	// instance does everything, as the node's only one.
	lock     *nodeLock
	standby  atomic.Bool   // another instance holds the node's lock
	synced   chan struct{} // closed at the first Synchronize
	syncOnce sync.Once

	reconcileKick chan struct{} // reconcile.go
	criMissing    atomic.Bool   // said once that no CRI socket was found
}

// guard is a container the policy changed, and what it must keep. Its
// fields from pol down are changed by the handlers, a reload and the
// verifier at once: they are only touched under the registry's lock
// (registry.go).
type guard struct {
	id, namespace, pod, name string
	plan                     enforce.Plan
	pol                      *policy.Policy // that decided plan

	cgroupsPath string // from the OCI spec, else the cgroup its pid was first found in; resolved once found
	pid         uint32
	oomKills    uint64
	missing     int    // verifications that found no cgroup
	drifts      int    // verifications in a row that found its score replaced (conflict.go)
	cgroupID    uint64 // its cgroup's id once found (cgroup v2)

	rescoring atomic.Bool // a walk after an update is pending
}

// attrs are a container's fields for a log line.
func (g *guard) attrs(more ...any) []any {
	return append([]any{"pod", g.namespace + "/" + g.pod, "container", g.name, "rule", g.plan.Rule}, more...)
}

// Options are what a plugin runs with.
type Options struct {
	// Config is in force until the runtime passes another or ConfigPath
	// changes; nil is config.Default(). Its nri settings hold until the
	// plugin stops.
	Config *config.Config
	// ConfigErr is why the configuration file could not be used, if it
	// could not: when that file asked for strict mode, the plugin fails
	// every container's creation until a usable configuration comes.
	ConfigErr error
	// ConfigPath is read again every nri.reload_interval; "" for never.
	ConfigPath string
	// Root is the host's filesystem root, holding /proc and /sys.
	Root string
	Log  *slog.Logger
	// Metrics are the plugin's, served at nri.metrics_address; nil for new ones.
	Metrics *Metrics
	// Launched: the runtime started the plugin, and the connection is the
	// runtime's; otherwise the plugin connects, and reconnects, itself.
	Launched bool
	// Events, when set, gets a Warning Event on the pod for each OOM kill in it.
	Events Recorder
	// Runtime, when set, keeps the runtime's restart state (install --state).
	Runtime *RuntimeWatch
	// HealthSocket, when set, is where /healthz is served to the pod's own
	// readiness probe (ServeHealth).
	HealthSocket string
	// Restarts is how often the supervisor started the plugin before this
	// time (oomguard_plugin_restarts_total starts there).
	Restarts int
	// FailClosed: the node was installed to fail closed (install
	// --fail-closed); the plugin says whether its runtime can.
	FailClosed bool
}

// New makes a plugin; Run connects it and runs it.
func New(o Options) *Plugin {
	o.Config = cmp.Or(o.Config, config.Default())
	o.Log = cmp.Or(o.Log, slog.New(slog.DiscardHandler))
	o.Metrics = cmp.Or(o.Metrics, NewMetrics())
	p := &Plugin{o: o, nri: o.Config.NRI, root: o.Root, log: o.Log, m: o.Metrics, reg: newRegistry(),
		kmsg: oomkills.OpenKmsg, events: o.Events, scored: newScored(), synced: make(chan struct{}), reconcileKick: make(chan struct{}, 1)}
	p.execs = p.openExecs
	p.kills = p.newKills()
	p.capacity = facts.Capacity(kernel.ReadMeminfo(o.Root))
	cfg, cfgErr := o.Config, o.ConfigErr
	strict := false
	if le := (*config.LoadError)(nil); errors.As(cfgErr, &le) {
		strict = le.Strict
	}
	pol, err := policy.New(cfg)
	if err != nil { // only a configuration config.Validate did not check
		strict = strict || cfg.Strict
		cfgErr = errors.Join(cfgErr, fmt.Errorf("compile the configuration's rules: %w", err))
		cfg = config.Default()
		pol, _ = policy.New(cfg)
	}
	p.setConfig(cfg, pol)
	p.runtime.Store(facts.RuntimeUnknown)
	if strict {
		p.unusable.Store(&cfgErr)
	}
	source := "file"
	if cfgErr != nil || cfg.Missing {
		source = "default"
	}
	p.m.configInForce(cfg.Hash, source, cfgErr)
	p.m.workerDeaths.Add(float64(o.Restarts))
	if c, ok := o.Events.(interface{ Collectors() []prometheus.Collector }); ok {
		p.m.reg.MustRegister(c.Collectors()...)
	}
	p.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "oomguard_guarded_containers",
		Help: "Containers whose values oomguard keeps."}, func() float64 {
		return float64(p.reg.guarded())
	}))
	return p
}

func (p *Plugin) setConfig(cfg *config.Config, pol *policy.Policy) {
	p.node.Store(enforce.NewNode(p.root, cfg.Containment.CgroupParents))
	p.pol.Store(pol)
	p.cfg.Store(cfg)
	p.announce()
}

// parseConfig is a configuration's text checked, and its policy compiled:
// in force whole, or not at all.
func parseConfig(b []byte) (*config.Config, *policy.Policy, error) {
	c, err := config.Parse(b)
	if err != nil {
		return nil, nil, err
	}
	pol, err := policy.New(c)
	if err != nil {
		return nil, nil, err
	}
	return c, pol, nil
}

// Configure takes the runtime's plugin configuration (/etc/nri/conf.d), when
// it has one, as the oomguard TOML configuration. A configuration that does
// not validate is not taken; if it (or the one in force) asks for strict
// mode, containers fail to be created until a usable one comes.
func (p *Plugin) Configure(_ context.Context, cfgText, runtime, version string) (api.EventMask, error) {
	p.runtime.Store(facts.RuntimeNamed(runtime))
	p.log.Info("connected to runtime", "runtime", runtime, "version", version, "cgroup", p.node.Load().Layout())
	if p.o.FailClosed {
		p.sayFailClosed(runtime, version)
	}
	if cfgText != "" {
		c, pol, err := parseConfig([]byte(cfgText))
		if err != nil {
			p.m.errors.WithLabelValues("configure").Inc()
			err = fmt.Errorf("configuration from the runtime: %w", err)
			if p.cfg.Load().Strict || config.StrictIn([]byte(cfgText)) {
				p.log.Error("configuration is unusable; strict mode: every container's creation fails until it is fixed", "err", err)
				p.unusable.Store(&err)
				p.m.setConfigValid(err)
				return 0, nil
			}
			p.log.Error("configuration from the runtime is invalid; keeping the current one", "err", err)
			p.m.setConfigValid(err)
		} else {
			p.setConfig(c, pol)
			p.unusable.Store(nil)
			p.m.configInForce(c.Hash, "runtime", nil)
		}
	}
	return 0, nil // subscribe to every event the plugin implements
}

// Synchronize fixes the containers that already run: memory.oom.group and
// oom_score_adj of every process in each container's cgroup, after the
// reply ("synchronized" is logged when that is done). It asks the runtime
// for nothing (see StartContainer).
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) (updates []*api.ContainerUpdate, err error) {
	start := time.Now()
	defer p.failOpen("synchronize", &err)
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	type fix struct {
		g *guard
		c *enforce.Container
	}
	var recs []*record
	var fixes []fix
	guarded := 0
	for _, ctr := range ctrs {
		if s := ctr.GetState(); s == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		rec, v := p.decide(byID[ctr.GetPodSandboxId()], ctr)
		p.tell("synchronize", v)
		recs = append(recs, rec)
		g := rec.guard
		if g == nil {
			continue
		}
		guarded++
		c, err := p.container(g, "synchronize")
		if err != nil {
			continue
		}
		fixes = append(fixes, fix{g, c})
	}
	p.reg.reset(recs)
	containers := len(ctrs)
	p.guardsChanged()
	p.m.setConnected(true)
	p.syncOnce.Do(func() { close(p.synced) })
	// Standing by, the instance that holds the node's lock fixes them, and
	// this one does when it takes the lock (takeOver): after the records
	// are in place, so that one of the two sees each container.
	standby := p.standby.Load()
	// The runtime drops a plugin that answers late (CRI-O and containerd
	// allow 2 s): the processes are fixed after the reply, not before it.
	p.afterReply(func() {
		var err error
		defer p.failOpen("synchronize", &err) // a panic here must not take the plugin down
		for _, rec := range recs {
			p.kills.CountFrom(rec.id)
		}
		if standby {
			fixes = nil
		}
		for _, f := range fixes {
			if n, _ := p.fix(f.g, f.c, "synchronize"); n > 0 {
				p.log.Info("existing container fixed", f.g.attrs("processes", n, "oom_score_adj", *f.g.plan.Score)...)
			}
		}
		d := time.Since(start)
		p.m.syncDuration.Set(d.Seconds())
		p.log.Info("synchronized", "containers", containers, "guarded", guarded, "duration", d.Round(time.Microsecond))
		p.reconcileSoon() // what the runtime created meanwhile and did not send
	})
	return nil, nil
}

// waitBackground waits for the work run after the handlers' replies.
func (p *Plugin) waitBackground() { p.background.Wait() }

// StartContainer decides and applies the plan to the created container,
// whose one process (the runtime's init, waiting) holds what every process
// of the container will inherit: the runtime starts it when this returns.
// It is the plugin's one event on the creation path (the runtime holds its
// NRI lock for each), and oomguard adjusts nothing through NRI: NRI
// refuses a container whose oom_score_adj or memory.oom.group two plugins
// set, and a pod must never fail to start because of oomguard.
func (p *Plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (err error) {
	defer p.failOpen("start", &err)
	if e := p.unusable.Load(); e != nil {
		return *e
	}
	rec, v := p.decide(pod, ctr)
	rec.books.Counted = true // its cgroup is new: its kills count from 0
	p.tell("start", v)
	g := rec.guard
	if g == nil {
		p.put(rec)
		return nil
	}
	if !p.mayWrite() && p.leave(rec, v.dec) {
		return nil
	}
	var group, score enforce.Change
	c, err := p.container(g, "start")
	found := err == nil
	if found {
		group, score, err = p.start(g, c, ctr)
	}
	p.put(rec)
	if !found {
		return fmt.Errorf("apply %s to %s/%s container %s: %w", g.plan.Rule, g.namespace, g.pod, g.name, err)
	}
	p.afterReply(func() {
		p.guardsChanged(g)
		p.log.Info("decision", g.attrs("phase", "start", enforce.SettingScore, score.String(), enforce.SettingGroup, group.String(), "reasons", v.dec.Reasons)...)
	})
	if err != nil {
		return fmt.Errorf("apply %s to %s/%s container %s: %w", g.plan.Rule, g.namespace, g.pod, g.name, err)
	}
	return nil
}

// leave puts a container that the node's lock holder sets, and reports
// whether it still is after the put: a takeover from then on fixes it.
func (p *Plugin) leave(rec *record, dec policy.Decision) bool {
	p.put(rec)
	if p.mayWrite() {
		return false
	}
	p.guardsChanged(rec.guard)
	p.log.Info("decision", rec.guard.attrs("phase", "start", enforce.SettingScore, "left to the node's lock holder", enforce.SettingGroup, "left to the node's lock holder",
		"reasons", dec.Reasons, "standby", true)...)
	return true
}

// put records a container StartContainer decided, once: its kills are
// counted from its cgroup's start.
func (p *Plugin) put(rec *record) {
	if p.reg.put(rec) {
		p.kills.Added(rec.id)
	}
}

// start applies g's plan to the created container c: what it did to each
// setting.
func (p *Plugin) start(g *guard, c *enforce.Container, ctr *api.Container) (group, score enforce.Change, err error) {
	group, score = g.plan.GroupChange(nil), g.plan.ScoreChange(nil)
	if g.plan.Group != nil {
		if group = p.startGroup(g, c, ctr); group.Err != nil {
			err = group.Err
		}
	}
	if g.plan.Score != nil {
		score, err = p.startScore(g, c, ctr, err)
	}
	return group, score, err
}

// afterReply runs f beside a handler's reply instead of before it (the
// runtime holds its NRI lock until the reply, and drops a plugin that
// answers Synchronize late); Run waits for it at shutdown. StartContainer's
// log line and exec filter are not needed before the container runs:
// nothing can exec into it before the runtime has the reply and started it.
func (p *Plugin) afterReply(f func()) {
	p.background.Add(1)
	go func() {
		defer p.background.Done()
		f()
	}()
}

// startGroup sets the new cgroup's memory.oom.group, from what the runtime
// says it set (kubelet's value) when it says.
func (p *Plugin) startGroup(g *guard, c *enforce.Container, ctr *api.Container) enforce.Change {
	var from bool
	switch ctr.GetLinux().GetResources().GetUnified()["memory.oom.group"] {
	case "1":
		from = true
	case "0":
	default:
		return p.enforceGroup(g, c, "start")
	}
	ch := c.SetGroup(*g.plan.Group, from)
	if ch.What == enforce.Changed {
		p.m.adjustments.WithLabelValues(enforce.SettingGroup, "start").Inc()
	}
	return ch
}

// startScore sets the score of the container's init, its one process, from
// the score the runtime gave it: the rest of the tree is walked only when
// the runtime did not say which process it is.
func (p *Plugin) startScore(g *guard, c *enforce.Container, ctr *api.Container, err error) (enforce.Change, error) {
	if pid := int(ctr.GetPid()); pid > 0 {
		var ch enforce.Change
		if v := ctr.GetLinux().GetOomScoreAdj(); v != nil {
			ch = c.SetScore(pid, *g.plan.Score, int(v.GetValue()))
		} else {
			ch = c.Score(pid, *g.plan.Score)
		}
		if ch.What == enforce.Changed {
			p.m.adjustments.WithLabelValues(enforce.SettingScore, "start").Inc()
		}
		if ch.Err != nil {
			p.m.errors.WithLabelValues("start").Inc()
		}
		return ch, errors.Join(err, ch.Err)
	}
	to := strconv.Itoa(*g.plan.Score)
	ch := enforce.Change{Setting: enforce.SettingScore, From: to, To: to, What: enforce.Unchanged}
	n, serr := p.enforceScore(g, c, "start")
	if n > 0 {
		ch.What, ch.From = enforce.Changed, ""
		if v := ctr.GetLinux().GetOomScoreAdj(); v != nil {
			ch.From = strconv.FormatInt(v.GetValue(), 10)
		}
	}
	return ch, errors.Join(err, serr)
}

// PostUpdateContainer sets the plan again after a resize: kubelet re-sends
// memory.oom.group = 1 (and its score) with every one, and the runtime has
// applied them. The group is one write, done before the reply; the scores
// of the container's processes are set after it, so that a resize holds
// the runtime's NRI lock no longer than a create, however many processes
// the container runs.
func (p *Plugin) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) (err error) {
	defer p.failOpen("update", &err)
	g := p.reg.guard(ctr.GetId())
	if g == nil || !p.current(g) || p.standby.Load() {
		return nil
	}
	if g.plan.Group != nil {
		if c, err := p.container(g, "update"); err == nil {
			if err := p.verifyGroup(g, c, "update"); err != nil && !enforce.IsGone(err) {
				p.m.errors.WithLabelValues("update").Inc()
				p.log.Warn("setting the group again after an update failed", g.attrs("err", err)...)
			}
		}
	}
	if g.plan.Score != nil && g.rescoring.CompareAndSwap(false, true) {
		p.afterReply(func() {
			g.rescoring.Store(false) // an update from now on walks again
			p.verify(g, "update")
		})
	}
	return nil
}

// RemoveContainer forgets the container, and its OOM kill series.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	rec := p.reg.remove(ctr.GetId())
	p.kills.Removed(ctr.GetId())
	if rec == nil {
		return nil
	}
	if rec.guard != nil {
		p.guardsChanged(rec.guard)
	}
	p.m.oom.Forget(rec.info.namespace, rec.info.pod, rec.info.name)
	return nil
}

func newCtrInfo(pod *api.PodSandbox, ctr *api.Container) ctrInfo {
	return ctrInfo{namespace: pod.GetNamespace(), pod: pod.GetName(), name: ctr.GetName(), podUID: pod.GetUid(),
		cgroupsPath: ctr.GetLinux().GetCgroupsPath(), pid: ctr.GetPid()}
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

// verdict is what decide found, for tell.
type verdict struct {
	facts policy.Facts
	dec   policy.Decision
	plan  enforce.Plan
}

// decide runs the policy on what NRI tells about the container and masks
// it against what the node supports. It changes nothing: the container's
// record, with the facts a reload decides it on again and, when the plan
// changes something, the guard that keeps it; tell says what it decided.
func (p *Plugin) decide(pod *api.PodSandbox, ctr *api.Container) (*record, verdict) {
	f := nrifacts.FromNRI(pod, ctr, p.runtime.Load().(string))
	f.Inputs.Capacity = p.capacity
	pol := p.pol.Load()
	k, whole, named := kept(f, p.cfg.Load())
	rec := &record{id: ctr.GetId(), info: newCtrInfo(pod, ctr), dec: decided{facts: k, whole: whole, named: named, pol: pol}}
	dec := pol.Decide(&f)
	plan := p.node.Load().Plan(dec)
	if dec.Changes() && plan.Changes() {
		rec.guard = &guard{
			id: ctr.GetId(), namespace: pod.GetNamespace(), pod: pod.GetName(), name: ctr.GetName(),
			cgroupsPath: ctr.GetLinux().GetCgroupsPath(), pid: ctr.GetPid(), plan: plan, pol: pol,
		}
	}
	return rec, verdict{facts: f, dec: dec, plan: plan}
}

// tell logs and counts a decision: the annotations it rejected, the rule
// it chose.
func (p *Plugin) tell(phase string, v verdict) {
	f, dec, plan := v.facts, v.dec, v.plan
	ids := []any{"pod", f.Namespace + "/" + f.Pod, "container", f.Container}
	for _, r := range dec.Rejected {
		p.m.rejections.Inc()
		p.log.Warn("annotation rejected", append(ids, "key", r.Key, "value", r.Value, "reason", r.Reason)...)
	}
	if dec.Missing != "" {
		p.m.inputsMissing.WithLabelValues(dec.Missing).Inc()
		p.log.Warn("score formula lacks an input; the spec's score kept", append(ids, "rule", dec.Rule, "input", dec.Missing, "reasons", dec.Reasons)...)
	}
	if !dec.Changes() {
		p.log.Debug("decision", append([]any{"phase", phase}, append(ids, "rule", dec.Rule, "reasons", dec.Reasons)...)...)
		return
	}
	p.m.decisions.WithLabelValues(dec.Rule).Inc()
	if phase != "start" { // StartContainer says what it decided and did in one line
		p.log.Info("decision", append([]any{"phase", phase}, append(ids, "rule", dec.Rule,
			enforce.SettingScore, plan.ScoreChange(f.OOMScoreAdj).String(),
			enforce.SettingGroup, plan.GroupChange(f.OOMGroup).String(), "reasons", dec.Reasons)...)...)
	}
}

// container is the container's own cgroup, as Locate finds and checks it.
// One found by its pid is kept: once the container's init exits, its pid
// can be another container's. A path outside every container is refused,
// logged and counted.
func (p *Plugin) container(g *guard, phase string) (*enforce.Container, error) {
	cgroupsPath, pid := p.reg.where(g)
	c, err := p.node.Load().Locate(cgroupsPath, int(pid))
	if err == nil && cgroupsPath != c.Cgroup() { // found: by its path from now on
		p.reg.found(g, c.Cgroup())
	}
	if errors.Is(err, enforce.ErrNotContained) {
		p.m.refusals.WithLabelValues(phase).Inc()
		p.log.Warn("refusing to write outside a container", g.attrs("phase", phase, "err", err)...)
	}
	return c, err
}

// fix sets an existing container's group flag and the score of each of its
// processes: how many processes it changed, and whether it changed the group.
func (p *Plugin) fix(g *guard, c *enforce.Container, phase string) (procs int, group bool) {
	if g.plan.Group != nil {
		ch := p.enforceGroup(g, c, phase)
		if ch.Err != nil && !enforce.IsGone(ch.Err) {
			p.m.errors.WithLabelValues(phase).Inc()
			p.log.Warn("setting memory.oom.group failed", g.attrs("cgroup", c.Cgroup(), "err", ch.Err)...)
		}
		group = ch.What == enforce.Changed
	}
	if g.plan.Score != nil {
		procs, _ = p.enforceScore(g, c, phase)
	}
	return procs, group
}

// enforceScore writes the planned score to every process of the container
// that does not have it, and returns how many it changed; its failures are
// logged and counted.
func (p *Plugin) enforceScore(g *guard, c *enforce.Container, phase string) (int, error) {
	r := p.scores(g, c, phase, true)
	return r.Changed, errors.Join(r.Errs...)
}

// scores is enforceScore saying what it found; with write false it only
// reads.
func (p *Plugin) scores(g *guard, c *enforce.Container, phase string, write bool) enforce.ScoreReport {
	r := c.SetScores(*g.plan.Score, write)
	for _, err := range r.Errs {
		if unread := (*kernel.UnreadError)(nil); errors.As(err, &unread) {
			p.m.unreadParts.Add(float64(unread.Parts))
			p.log.Warn("part of the container's cgroup tree could not be read; the processes there were left as they are", g.attrs("parts", unread.Parts, "err", err)...)
			continue
		}
		p.m.errors.WithLabelValues(phase).Inc()
		p.log.Warn("setting oom_score_adj failed", g.attrs("cgroup", c.Cgroup(), "err", err)...)
	}
	if r.Changed > 0 { // every phase's series is made at the start (NewMetrics)
		p.m.adjustments.WithLabelValues(enforce.SettingScore, phase).Add(float64(r.Changed))
	}
	return r
}
