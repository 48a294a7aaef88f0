package nriplugin

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/metricsserver"
	"github.com/oomguard/oomguard/internal/oomkills"
	"github.com/oomguard/oomguard/internal/version"
)

// Metrics are kept whether or not they are served.
type Metrics struct {
	reg          *prometheus.Registry
	decisions    *prometheus.CounterVec
	adjustments  *prometheus.CounterVec
	rejections   prometheus.Counter
	drift        *prometheus.CounterVec
	errors       *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	oomKills     prometheus.Counter
	syncDuration prometheus.Gauge
	connected    prometheus.Gauge
	serveErrors  prometheus.Counter
	execLost     prometheus.Counter
	oom          *oomkills.Metrics
	unreadParts  prometheus.Counter
	configValid  prometheus.Gauge
	configInfo   *prometheus.GaugeVec
	reloads      *prometheus.CounterVec
	fixedChanged prometheus.Gauge
	restartWait  prometheus.Gauge
	restarts     *prometheus.CounterVec
	lockHeld     prometheus.Gauge
	workerDeaths prometheus.Counter
	failClosed   prometheus.Gauge
	reconciled   *prometheus.CounterVec
	// Score formulas and other writers (formula.go).
	inputsMissing *prometheus.CounterVec
	conflicts     prometheus.Counter
	yielded       prometheus.Counter
	isConnected   atomic.Bool
	waiting       atomic.Pointer[string] // the runtimes the node waits for to restart
	badConfig     atomic.Pointer[string] // why the configuration last read is not in force
}

// NewMetrics makes the plugin's counters in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_decisions_total",
			Help: "Containers a rule or annotation changed, by rule."}, []string{"rule"}),
		adjustments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_adjustments_total",
			Help: "Values set, by setting and phase (start, synchronize, update, exec, verify, reload)."}, []string{"setting", "phase"}),
		rejections: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_annotation_rejections_total",
			Help: "Pod annotations rejected and not applied."}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_drift_corrections_total",
			Help: "Values found changed after creation and set again, by setting."}, []string{"setting"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_errors_total",
			Help: "Failures, each logged, by phase."}, []string{"phase"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_refused_writes_total",
			Help: "Writes refused because the cgroup or process was not one container's own, by phase."}, []string{"phase"}),
		oomKills: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_guarded_oom_kills_total",
			Help: "OOM kills the kernel reported in guarded containers (memory.events oom_kill)."}),
		syncDuration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_synchronize_duration_seconds",
			Help: "How long the last Synchronize took."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_nri_connected",
			Help: "1 while connected to the runtime's NRI."}),
		serveErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_metrics_listen_errors_total",
			Help: "Times the metrics address could not be bound (retried; enforcement goes on)."}),
		execLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_exec_events_lost_total",
			Help: "Times the kernel dropped process events (execs came faster than read); the verifier finds what they missed."}),
		oom: oomkills.NewMetrics(),
		unreadParts: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_cgroup_parts_unread_total",
			Help: "Parts of guarded containers' cgroup trees that could not be read (a path past PATH_MAX nested deeper than oomguard walks, a directory that cannot be opened): their processes were left as they were."}),
		configValid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_config_valid",
			Help: "1 when the configuration last read (file or runtime) validated and is in force; 0 when it did not, or the file cannot be used (gone, empty, not a regular file, too large, a kernel interface): the last good one (or none) stays."}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oomguard_config_info",
			Help: "1, labelled with the configuration in force: the first 12 hex digits of its SHA-256 (sha256sum of the file) and where it came from (file, runtime, default)."},
			[]string{"hash", "source"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_config_reloads_total",
			Help: "Changed configurations read after the start, by result (success, failure: the one in force stays)."}, []string{"result"}),
		fixedChanged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_config_restart_needed",
			Help: "Settings the configuration in force changes that only a restart of the plugin applies (nri.*, log.level, log.format); the log names them. 0: none."}),
		restartWait: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_runtime_restart_pending",
			Help: "1 while the node's runtime must restart to read the NRI configuration oomguard wrote (new containers get kubelet's settings until then)."}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_runtime_restarts_total",
			Help: "Restarts of the node's runtime by oomguard (restartRuntime), by result (failure: the job failed, or NRI did not come up)."}, []string{"result"}),
		lockHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_node_lock_held",
			Help: "1 while this instance holds the node's lock: it reports the node's OOM kills and keeps its containers (an instance standing by serves no metrics)."}),
		workerDeaths: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_plugin_restarts_total",
			Help: "Times the plugin's supervisor (--supervise) started the plugin again in this container after it died (a crash, a kill, the OOM killer)."}),
		failClosed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_fail_closed_enforced",
			Help: "With --fail-closed: 1 when the runtime connected to refuses containers whose pod requires oomguard while it is away (NRI's validator: containerd 2.2, CRI-O 1.34 and later), 0 when it cannot. 0 without --fail-closed."}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_reconciled_total",
			Help: "Containers the runtime runs but never told the plugin of (created while it connected), found through the runtime's CRI, by outcome: guarded (a rule applies, now set), unchanged (no rule changes it), undecided (the runtime did not give what deciding needs; the log says what)."},
			[]string{"outcome"}),
		inputsMissing: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_score_inputs_missing_total",
			Help: "Containers a rule's score formula could not score, the spec's score kept, by the input nobody vouched for (request, limit, capacity, priority, band, qos)."},
			[]string{"input"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_score_conflicts_total",
			Help: "Containers whose score another writer kept changing back (found replaced at verifications in a row); the log names the value found."}),
		yielded: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_score_yielded_total",
			Help: "Containers whose score oomguard left to another writer after a conflict (no longer set until the container is created again, the configuration changes or the plugin reconnects)."}),
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oomguard_build_info",
		Help: "1, labelled with the plugin's release and commit."}, []string{"version", "commit"})
	buildInfo.WithLabelValues(version.Version, version.Commit).Set(1)
	for _, setting := range []string{enforce.SettingScore, enforce.SettingGroup} {
		m.drift.WithLabelValues(setting)
		for _, phase := range phases {
			m.adjustments.WithLabelValues(setting, phase)
		}
	}
	for _, phase := range append([]string{"configure", "create", "oom"}, phases...) {
		m.errors.WithLabelValues(phase)
		m.refusals.WithLabelValues(phase)
	}
	for _, o := range []string{"guarded", "unchanged", "undecided"} {
		m.reconciled.WithLabelValues(o)
	}
	for _, in := range []string{"request", "limit", "capacity", "priority", "band", "qos"} {
		m.inputsMissing.WithLabelValues(in)
	}
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
		m.restarts.WithLabelValues(r)
	}
	m.reg.MustRegister(m.decisions, m.adjustments, m.rejections, m.drift, m.errors, m.refusals, m.oomKills, m.syncDuration,
		m.connected, m.serveErrors, m.execLost, m.unreadParts,
		m.configValid, m.configInfo, m.reloads, m.fixedChanged, m.restartWait, m.restarts, m.lockHeld, m.workerDeaths, m.failClosed, m.reconciled, m.inputsMissing, m.conflicts, m.yielded, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.oom.Collectors()...)
	return m
}

// phases are where the plugin sets values, its metrics' phase label.
var phases = []string{"start", "synchronize", "update", "exec", "verify", "reload", "takeover", "reconcile"}

// configInForce records the configuration now in force (hash of its text,
// its source) and whether the one last read was it.
func (m *Metrics) configInForce(hash, source string, why error) {
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(hash, source).Set(1)
	m.setConfigValid(why)
}

// setConfigValid: why is nil when the configuration last read is in force.
func (m *Metrics) setConfigValid(why error) {
	if why == nil {
		m.badConfig.Store(nil)
		m.configValid.Set(1)
		return
	}
	s := why.Error()
	m.badConfig.Store(&s)
	m.configValid.Set(0)
}

// Serve exposes /metrics and /healthz (200 while connected, or waiting for
// the runtime's restart) on addr until
// ctx ends. It returns at once: an address that cannot be bound (a port
// taken) is logged, counted and retried, and never stops enforcement.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		MaxRequestsInFlight: 2,
		Timeout:             metricsserver.WriteTimeout / 2,
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("/healthz", m.health)
	metricsserver.Serve(ctx, addr, mux, log, m.serveErrors.Inc)
}

// health is /healthz: 200 while connected (holding the node's lock or
// standing by), or waiting for the runtime's restart; 503 and why otherwise.
func (m *Metrics) health(w http.ResponseWriter, _ *http.Request) {
	switch bad, waiting := m.badConfig.Load(), m.waiting.Load(); {
	case bad != nil:
		http.Error(w, "configuration invalid, the last good one (or none) in force: "+*bad, http.StatusServiceUnavailable)
	case !m.isConnected.Load() && waiting != nil:
		// Not a failure: the rollout goes on, the gauge and the node's condition say it.
		fmt.Fprintf(w, "waiting for %s to restart and read oomguard's NRI configuration\n", *waiting)
	case !m.isConnected.Load():
		http.Error(w, "not connected to the runtime", http.StatusServiceUnavailable)
	default:
		w.Write([]byte("ok\n"))
	}
}

// ServeHealth serves /healthz on a unix socket at path, for the pod's own
// readiness probe (oomguard-nri health), until ctx ends: the node's port is
// the node lock holder's, and during a rollout it answers for the other pod.
func (m *Metrics) ServeHealth(ctx context.Context, path string, log *slog.Logger) {
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Error("cannot serve /healthz on its socket: the pod's readiness probe fails", "socket", path, "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", m.health)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		IdleTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() { <-ctx.Done(); srv.Close() }()
	go srv.Serve(l)
}

// setWaiting records the runtimes waited for ("" for none).
func (m *Metrics) setWaiting(units string) {
	if units == "" {
		m.waiting.Store(nil)
		m.restartWait.Set(0)
		return
	}
	m.waiting.Store(&units)
	m.restartWait.Set(1)
}

func (m *Metrics) setConnected(on bool) {
	m.isConnected.Store(on)
	if on {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}
