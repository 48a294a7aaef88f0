package nriplugin

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/restartstate"
)

// A runtime that must restart before it serves NRI (install --nri-only
// wrote its drop-in, and the operator restarts runtimes when it suits them)
// is a state of its own, not a failure: while the runtime's process that
// install saw still runs, the plugin is waiting. /healthz answers 200 and
// says so (a first `helm install --wait` completes), the gauge
// oomguard_runtime_restart_pending is 1, and the node's condition says it,
// for kubectl. With Restart, the plugin restarts the runtime itself, when it
// holds one of the cluster's few restart slots: a rollout never restarts
// every runtime at once, and a restart that fails keeps its slot until the
// node serves NRI again, which halts the others.

// RuntimeWatch is what the plugin does about its runtime's restart.
type RuntimeWatch struct {
	// State is the file install --nri-only --state wrote.
	State string
	// Restart, when set, restarts a unit through the node's systemd and
	// waits for the job's end.
	Restart restartstate.Restarter
	// Slots, when set, bounds the nodes restarting at once.
	Slots Slots
	// Condition, when set, publishes the state on the node.
	Condition NodeCondition
	// Interval is how often the state is looked at; Connect how long a
	// restarted runtime has to serve NRI before the restart counts as failed.
	Interval, Connect time.Duration
}

// Slots are a cluster-wide limit: Acquire takes one (true) or finds none
// free; Renew keeps the one held; Release frees it.
type Slots interface {
	Acquire(ctx context.Context) (bool, error)
	Renew(ctx context.Context) error
	Release(ctx context.Context) error
}

// NodeCondition publishes one condition of the node: status is True, False
// or Unknown.
type NodeCondition interface {
	Set(ctx context.Context, status, reason, message string) error
}

// ConditionType is the node condition the plugin keeps: True while the
// node's runtime must restart before oomguard guards new containers.
const ConditionType = "OOMGuardRuntimeRestartPending"

// runtimeState is the plugin's view of its runtime, for /healthz, the
// gauge and the node's condition.
type runtimeState struct {
	status, reason, message string // the condition's
	waiting                 string // the units waited for, "" when none
}

// watchRuntime keeps the runtime's state until ctx ends; then the node's
// condition says Unknown: nothing on the node reports it any more.
func (p *Plugin) watchRuntime(ctx context.Context, w RuntimeWatch) {
	w.Interval = cmp.Or(w.Interval, 5*time.Second)
	w.Connect = cmp.Or(w.Connect, 2*time.Minute)
	r := &restarter{p: p, w: w, log: p.log.With("part", "runtime-restart")}
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		r.step(ctx)
		select {
		case <-ctx.Done():
			if r.p.standby.Load() { // the holder of the node's lock says what the node runs
				return
			}
			stop, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r.publish(stop, runtimeState{status: "Unknown", reason: "PluginStopped", message: "oomguard-nri stopped on this node."})
			return
		case <-t.C:
		}
	}
}

type restarter struct {
	p         *Plugin
	w         RuntimeWatch
	log       *slog.Logger
	published *runtimeState // what the node's condition says
	held      bool          // a restart slot
	renewed   time.Time
	phase     phase
	restarted time.Time         // when this plugin restarted the runtime
	failed    string            // why its restart failed
	said      map[string]string // each message said once, with its last error
}

// phase is where this plugin's restart of the runtime is: it restarts it
// once at most; a failed one waits for the operator.
type phase int

const (
	notRestarted phase = iota
	restarted          // waiting for the runtime to serve NRI
	failed             // the slot held until it does
	done
)

// step looks at the state once: publishes it, and restarts the runtime
// when it may.
func (r *restarter) step(ctx context.Context) {
	st, err := restartstate.Read(r.w.State)
	if err != nil {
		r.sayOnce(slog.LevelWarn, "cannot read what install left; waiting for nothing", err)
	}
	waiting := st.Waiting(r.p.root)
	connected := r.p.m.isConnected.Load()
	r.settle(ctx, connected)
	var units []string
	for _, w := range waiting {
		units = append(units, w.Unit)
	}
	s := runtimeState{status: "False", reason: "NRIConnected", message: "The runtime serves NRI: oomguard sets the OOM settings of new containers."}
	switch {
	case connected:
	case r.phase == failed:
		s.status, s.reason, s.message = "True", "RuntimeRestartFailed", r.failed
	case len(waiting) > 0:
		s.status, s.waiting, s.reason = "True", strings.Join(units, " "), "RuntimeRestartPending"
		s.message = fmt.Sprintf("%s has not restarted since oomguard enabled NRI in its configuration: until it does, new containers get kubelet's OOM settings. Restart it when it suits you (systemctl restart %s), or let oomguard (restartRuntime=true).",
			s.waiting, s.waiting)
	default:
		s.reason, s.message = "NRINotConnected", "oomguard-nri is not connected to the runtime's NRI at "+st.Socket+": its log says why."
	}
	r.publish(ctx, s)
	if r.p.standby.Load() { // the node's condition and its runtime are the lock holder's
		return
	}
	if len(waiting) > 0 && !connected && r.w.Restart != nil && r.phase == notRestarted {
		r.restart(ctx, waiting)
	}
	if r.held && time.Since(r.renewed) > 20*time.Second {
		if err := r.w.Slots.Renew(ctx); err != nil {
			r.log.Warn("cannot renew the restart slot", "err", err)
		}
		r.renewed = time.Now()
	}
}

// restart restarts the waiting runtimes once this node holds a slot.
func (r *restarter) restart(ctx context.Context, waiting []restartstate.Pending) {
	if r.w.Slots != nil && !r.held {
		ok, err := r.w.Slots.Acquire(ctx)
		if err != nil {
			r.log.Warn("cannot take a restart slot; trying again", "err", err)
			return
		}
		if !ok {
			r.sayOnce(slog.LevelInfo, "every restart slot is held by another node; waiting for one", nil)
			return
		}
		r.held, r.renewed = true, time.Now()
	}
	r.phase, r.restarted = restarted, time.Now()
	for _, w := range waiting {
		r.log.Info("restarting the runtime to read oomguard's NRI configuration", "unit", w.Unit, "pid", w.Process.PID)
		job, err := r.w.Restart(r.p.root, w.Unit)
		if err != nil {
			r.fail(fmt.Sprintf("Restarting %s did not succeed: %v.", w.Unit, err))
			return
		}
		r.log.Info("restarted the runtime", "unit", w.Unit, "job", job)
	}
}

func (r *restarter) fail(why string) {
	r.phase, r.failed = failed, why+" This node keeps its restart slot, so that no other node restarts, until its runtime serves NRI."
	r.log.Error("the runtime's restart failed; keeping the restart slot until it serves NRI", "why", why)
	r.p.m.restarts.WithLabelValues("failure").Inc()
}

// settle ends a restart: once the runtime serves NRI the slot is freed; a
// runtime that does not within Connect failed its restart.
func (r *restarter) settle(ctx context.Context, connected bool) {
	switch {
	case r.phase == restarted && connected:
		r.p.m.restarts.WithLabelValues("success").Inc()
		r.log.Info("the runtime serves NRI after its restart", "took", time.Since(r.restarted).Round(time.Millisecond))
	case r.phase == failed && connected:
		r.log.Info("the runtime serves NRI again")
	case r.phase == restarted && time.Since(r.restarted) >= r.w.Connect:
		r.fail(fmt.Sprintf("The runtime restarted but did not serve NRI within %s.", r.w.Connect))
		return
	default:
		return
	}
	r.phase, r.failed = done, ""
	if r.held {
		if err := r.w.Slots.Release(ctx); err != nil {
			r.log.Warn("cannot free the restart slot; it expires", "err", err)
		}
		r.held = false
	}
}

// publish sets the gauge and /healthz's view, and the node's condition
// when it changed.
func (r *restarter) publish(ctx context.Context, s runtimeState) {
	r.p.m.setWaiting(s.waiting)
	if r.w.Condition == nil || r.p.standby.Load() || (r.published != nil && *r.published == s) {
		return
	}
	if err := r.w.Condition.Set(ctx, s.status, s.reason, s.message); err != nil {
		r.sayOnce(slog.LevelWarn, "cannot set the node's condition "+ConditionType, err)
		return
	}
	r.published = &s
}

// sayOnce logs what the loop meets every few seconds the first time only
// (again when its error changes).
func (r *restarter) sayOnce(level slog.Level, msg string, err error) {
	why := ""
	if err != nil {
		why = err.Error()
	}
	if prev, ok := r.said[msg]; ok && prev == why {
		return
	}
	if r.said == nil {
		r.said = map[string]string{}
	}
	r.said[msg] = why
	if err != nil {
		r.log.Log(context.Background(), level, msg, "err", err)
	} else {
		r.log.Log(context.Background(), level, msg)
	}
}
