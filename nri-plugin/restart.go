package nriplugin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/backoff"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kubeapi"
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
// every runtime at once. A node waiting for a slot asks again after a
// jittered backoff (5 s doubling to 5 minutes), not at every look: a
// fleet's waiting nodes are thousands. A restart that fails frees its slot
// and says why (the log, the node's condition, the counter).
//
// The node's condition is written when it changes, and what it says is
// kept beside the node's lock, so that a worker started again (a crash, an
// OOM kill of it) writes nothing new; a failed write backs off, jittered,
// and a refusal (403: RBAC or the node-scoped policy; 404: no such node)
// is said once and tried again after an hour.

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
	// restarted runtime has to serve NRI before the restart counts as
	// failed; Grace how long the plugin just started has to connect before
	// the node's condition says it is not connected (its outcome is the
	// news, not the moment before: a rollout, a crash loop write nothing
	// more).
	Interval, Connect, Grace time.Duration
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
	Status, Reason, Message string // the condition's
	waiting                 string // the units waited for, "" when none
}

// conditionFile keeps, beside the node's lock, what the node's condition says.
const conditionFile = "condition.json"

// Backoffs of the writes to the API server.
var (
	slotBackoff      = backoff.Backoff{Base: 5 * time.Second, Max: 5 * time.Minute}
	conditionBackoff = backoff.Backoff{Base: 5 * time.Second, Max: 5 * time.Minute}
	refusedRetry     = time.Hour
)

// watchRuntime keeps the runtime's state until ctx ends; then the node's
// condition says Unknown: nothing on the node reports it any more.
func (p *Plugin) watchRuntime(ctx context.Context, w RuntimeWatch) {
	w.Interval = cmp.Or(w.Interval, 5*time.Second)
	w.Connect = cmp.Or(w.Connect, 2*time.Minute)
	w.Grace = cmp.Or(w.Grace, 30*time.Second)
	r := newRestarter(p, w)
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
			if !r.refused {
				r.condNext = time.Time{}
				r.publish(stop, runtimeState{Status: "Unknown", Reason: "PluginStopped", Message: "oomguard-nri stopped on this node."})
			}
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

	started              time.Time // the watch's start
	slotNext, condNext   time.Time // no try before
	slotTries, condTries backoff.Backoff
	refused              bool // the condition's last write was refused (403, 404)
}

// newRestarter starts from what the node's condition says, as the last
// worker on this node left it.
func newRestarter(p *Plugin, w RuntimeWatch) *restarter {
	r := &restarter{p: p, w: w, log: p.log.With("part", "runtime-restart"), slotTries: slotBackoff, condTries: conditionBackoff, started: time.Now()}
	r.published = r.lastPublished()
	return r
}

// phase is where this plugin's restart of the runtime is: it restarts it
// once at most; a failed one waits for the operator.
type phase int

const (
	notRestarted phase = iota
	restarted          // waiting for the runtime to serve NRI
	failed             // waiting for the operator
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
	s := runtimeState{Status: "False", Reason: "NRIConnected", Message: "The runtime serves NRI: oomguard sets the OOM settings of new containers."}
	switch {
	case connected:
	case r.phase == failed:
		s.Status, s.Reason, s.Message = "True", "RuntimeRestartFailed", r.failed
	case len(waiting) > 0:
		s.Status, s.waiting, s.Reason = "True", strings.Join(units, " "), "RuntimeRestartPending"
		s.Message = fmt.Sprintf("%s has not restarted since oomguard enabled NRI in its configuration: until it does, new containers get kubelet's OOM settings. Restart it when it suits you (systemctl restart %s), or let oomguard (restartRuntime=true).",
			s.waiting, s.waiting)
	case time.Since(r.started) < r.w.Grace:
		r.p.m.setWaiting("")
		return
	default:
		s.Reason, s.Message = "NRINotConnected", "oomguard-nri is not connected to the runtime's NRI at "+st.Socket+": its log says why."
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
		if time.Now().Before(r.slotNext) {
			return
		}
		ok, err := r.w.Slots.Acquire(ctx)
		if err != nil || !ok {
			wait := r.slotTries.Failed(kubeapi.RetryAfter(err))
			r.slotNext = time.Now().Add(wait)
			if err != nil {
				r.log.Warn("cannot take a restart slot; trying again", "in", wait.Round(time.Second), "err", err)
			} else {
				r.sayOnce(slog.LevelInfo, "every restart slot is held by another node; waiting for one", nil)
			}
			return
		}
		r.slotTries.Succeeded()
		r.held, r.renewed = true, time.Now()
	}
	r.phase, r.restarted = restarted, time.Now()
	for _, w := range waiting {
		r.log.Info("restarting the runtime to read oomguard's NRI configuration", "unit", w.Unit, "pid", w.Process.PID)
		job, err := r.w.Restart(r.p.root, w.Unit)
		if err != nil {
			r.fail(ctx, fmt.Sprintf("Restarting %s did not succeed: %v.", w.Unit, err))
			return
		}
		r.log.Info("restarted the runtime", "unit", w.Unit, "job", job)
	}
}

// fail ends a restart that failed: said, counted, its slot freed for the
// other nodes; the runtime is the operator's now.
func (r *restarter) fail(ctx context.Context, why string) {
	r.phase, r.failed = failed, why+" oomguard does not restart it again: fix the runtime and restart it (systemctl restart); this node freed its restart slot."
	r.log.Error("the runtime's restart failed; freeing the restart slot, not restarting it again", "why", why)
	r.p.m.restarts.WithLabelValues("failure").Inc()
	r.release(ctx)
}

func (r *restarter) release(ctx context.Context) {
	if !r.held {
		return
	}
	if err := r.w.Slots.Release(ctx); err != nil {
		r.log.Warn("cannot free the restart slot; it expires", "err", err)
	}
	r.held = false
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
		r.fail(ctx, fmt.Sprintf("The runtime restarted but did not serve NRI within %s.", r.w.Connect))
		return
	default:
		return
	}
	r.phase, r.failed = done, ""
	r.release(ctx)
}

// publish sets the gauge and /healthz's view, and the node's condition
// when it changed (and no backoff holds it).
func (r *restarter) publish(ctx context.Context, s runtimeState) {
	r.p.m.setWaiting(s.waiting)
	s.waiting = ""
	if r.w.Condition == nil || r.p.standby.Load() || (r.published != nil && *r.published == s) || time.Now().Before(r.condNext) {
		return
	}
	err := r.w.Condition.Set(ctx, s.Status, s.Reason, s.Message)
	if code := kubeapi.Code(err); code == http.StatusForbidden || code == http.StatusNotFound {
		r.refused, r.condNext = true, time.Now().Add(refusedRetry)
		why := "the service account may not patch this node's status: the chart's ClusterRole grants it, and its node-scoped policy allows it only with a token bound to a pod on this node (--node-name must be this node's name)"
		if code == http.StatusNotFound {
			why = "no Node has this name: --node-name ($NODE_NAME, the pod's spec.nodeName) must be the node's own"
		}
		r.log.Error("the API server refused the node's condition "+ConditionType+"; trying again in an hour", "why", why, "err", err)
		return
	}
	r.refused = false
	if err != nil {
		wait := r.condTries.Failed(kubeapi.RetryAfter(err))
		r.condNext = time.Now().Add(wait)
		r.sayOnce(slog.LevelWarn, "cannot set the node's condition "+ConditionType+"; trying again after a backoff", err)
		return
	}
	r.condTries.Succeeded()
	r.published = &s
	if r.p.lock != nil {
		b, _ := json.Marshal(s)
		if err := atomicfile.Write(filepath.Join(r.p.lock.dir, conditionFile), append(b, '\n'), 0o600); err != nil {
			r.log.Warn("cannot keep what the node's condition says; a restarted worker writes it again", "err", err)
		}
	}
}

// lastPublished is what the node's condition says, as the last worker on
// this node wrote it; nil if not known.
func (r *restarter) lastPublished() *runtimeState {
	if r.p.lock == nil {
		return nil
	}
	b, err := kernel.ReadFile(filepath.Join(r.p.lock.dir, conditionFile), kernel.MaxSmall)
	var s runtimeState
	if err != nil || json.Unmarshal(b, &s) != nil || s.Status == "" {
		return nil
	}
	return &s
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
