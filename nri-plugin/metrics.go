package nriplugin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/oomguard/oomguard/internal/version"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	isConnected  atomic.Bool
}

// NewMetrics makes the plugin's counters in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_decisions_total",
			Help: "Containers a rule or annotation changed, by rule."}, []string{"rule"}),
		adjustments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_adjustments_total",
			Help: "Values set, by setting and phase (create, update, synchronize, start, verify)."}, []string{"setting", "phase"}),
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
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oomguard_build_info",
		Help: "1, labelled with the plugin's release and commit."}, []string{"version", "commit"})
	buildInfo.WithLabelValues(version.Version, version.Commit).Set(1)
	m.reg.MustRegister(m.decisions, m.adjustments, m.rejections, m.drift, m.errors, m.refusals, m.oomKills, m.syncDuration, m.connected, buildInfo)
	return m
}

// Serve exposes /metrics and /healthz (200 while connected) on addr until ctx ends.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if m.isConnected.Load() {
			w.Write([]byte("ok\n"))
			return
		}
		http.Error(w, "not connected to the runtime", http.StatusServiceUnavailable)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	log.Info("serving metrics", "address", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return nil
}

func (m *Metrics) setConnected(on bool) {
	m.isConnected.Store(on)
	if on {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}
