package admission

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/internal/version"
)

// Metrics are the webhook's, in a registry of their own.
type Metrics struct {
	Registry *prometheus.Registry
	reviews  *prometheus.CounterVec
	images   *prometheus.CounterVec
	latency  prometheus.Histogram
	patches  *prometheus.CounterVec
	patchDur prometheus.Histogram

	certRenewals *prometheus.CounterVec
	certExpiry   prometheus.Gauge
	serveErrors  prometheus.Counter
}

// NewMetrics makes the webhook's metrics, every series there from the start.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_reviews_total",
			Help: "Admission reviews answered, by result: mutated, unchanged (nothing to change, or nothing patched in time), skipped (not a pod's creation, or a namespace left alone), invalid."},
			[]string{"result"}),
		images: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_images_total",
			Help: "Selected container images in reviews, by how they were answered: cached, patched (in time), pending (admitted unpatched, patch going on), failed, skipped (a patched image already), dry-run."},
			[]string{"state"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "oomguard_webhook_review_seconds",
			Help: "Time to answer one admission review.", Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .5, 1, 2.5, 5, 10}}),
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_patches_total",
			Help: "Patches on demand that finished, by result: patched, failed, skipped; those past a review's deadline finished in the background."},
			[]string{"result"}),
		patchDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "oomguard_webhook_patch_seconds",
			Help: "Time one patch on demand took (finding or pushing the result).", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}),
		certRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_certificate_renewals_total",
			Help: "Serving certificates (and CAs) this replica made and wrote to its Secret, by result: renewed, failed."}, []string{"result"}),
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_webhook_certificate_expiry_timestamp_seconds",
			Help: "When the serving certificate in use expires (Unix time)."}),
		serveErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_webhook_metrics_serve_errors_total",
			Help: "Times the metrics address could not be bound (retried; admission goes on)."}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oomguard_webhook_build_info", Help: "The webhook's version."}, []string{"version", "commit"})
	build.WithLabelValues(version.Version, version.Commit).Set(1)
	for _, r := range []string{"mutated", "unchanged", "skipped", "invalid"} {
		m.reviews.WithLabelValues(r)
	}
	for _, s := range []string{"cached", "patched", "pending", "failed", "skipped", "dry-run"} {
		m.images.WithLabelValues(s)
	}
	for _, s := range []string{"patched", "failed", "skipped"} {
		m.patches.WithLabelValues(s)
	}
	for _, r := range []string{"renewed", "failed"} {
		m.certRenewals.WithLabelValues(r)
	}
	m.Registry.MustRegister(m.reviews, m.images, m.latency, m.patches, m.patchDur, m.certRenewals, m.certExpiry, m.serveErrors, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Finished counts a patch on demand that ended (imagepatch.Resolver.Finished).
func (m *Metrics) Finished(r imagepatch.Resolution, d time.Duration) {
	m.patches.WithLabelValues(string(r.State)).Inc()
	m.patchDur.Observe(d.Seconds())
}

func (m *Metrics) certRenewal(result string) { m.certRenewals.WithLabelValues(result).Inc() }
