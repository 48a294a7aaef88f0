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
	throttle *prometheus.CounterVec

	certRenewals *prometheus.CounterVec
	certExpiry   prometheus.Gauge
	serveErrors  prometheus.Counter
	// clientRefused counts connections whose verified client certificate
	// named none of --client-names (a handshake without one is refused by
	// the TLS stack, and logged at debug).
	clientRefused prometheus.Counter
}

// NewMetrics makes the webhook's metrics, every series there from the start.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_reviews_total",
			Help: "Admission reviews answered, by result: mutated, unchanged (nothing to change, or nothing patched in time), skipped (not a pod's creation, or a namespace left alone), invalid, busy (refused unread: too many review bytes in flight)."},
			[]string{"result"}),
		images: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_images_total",
			Help: "Selected container images in reviews, by how they were answered: cached, patched (in time), pending (admitted unpatched, patch going on), throttled (admitted unpatched, a limit on the work reached), failed, skipped (a patched image already), dry-run."},
			[]string{"state"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "oomguard_webhook_review_seconds",
			Help: "Time to answer one admission review.", Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .5, 1, 2.5, 5, 10}}),
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_patches_total",
			Help: "Patches on demand that finished, by result: patched, failed, skipped; those past a review's deadline finished in the background."},
			[]string{"result"}),
		patchDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "oomguard_webhook_patch_seconds",
			Help: "Time one patch on demand took (finding or pushing the result).", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}),
		throttle: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_throttled_total",
			Help: "Selected images admitted unpatched at once, without patching, because a limit on the work callers cause was reached, by limit: concurrent, rate, repository (patches per minute for one source repository), lookups (tag lookups at once)."},
			[]string{"limit"}),
		certRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_webhook_certificate_renewals_total",
			Help: "Serving certificates (and CAs) this replica made and wrote to its Secret, by result: renewed, failed."}, []string{"result"}),
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "oomguard_webhook_certificate_expiry_timestamp_seconds",
			Help: "When the serving certificate in use expires (Unix time)."}),
		serveErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_webhook_metrics_serve_errors_total",
			Help: "Times the metrics address could not be bound (retried; admission goes on)."}),
		clientRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_webhook_clients_refused_total",
			Help: "Connections refused because their client certificate, verified by --client-ca, named none of --client-names."}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oomguard_webhook_build_info", Help: "The webhook's version."}, []string{"version", "commit"})
	build.WithLabelValues(version.Version, version.Commit).Set(1)
	for _, r := range []string{"mutated", "unchanged", "skipped", "invalid", "busy"} {
		m.reviews.WithLabelValues(r)
	}
	for _, s := range []string{"cached", "patched", "pending", "throttled", "failed", "skipped", "dry-run"} {
		m.images.WithLabelValues(s)
	}
	for _, s := range []string{"patched", "failed", "skipped"} {
		m.patches.WithLabelValues(s)
	}
	for _, l := range []string{imagepatch.LimitConcurrent, imagepatch.LimitRate, imagepatch.LimitRepository, imagepatch.LimitLookups} {
		m.throttle.WithLabelValues(l)
	}
	for _, r := range []string{"renewed", "failed"} {
		m.certRenewals.WithLabelValues(r)
	}
	m.Registry.MustRegister(m.reviews, m.images, m.latency, m.patches, m.patchDur, m.throttle, m.certRenewals, m.certExpiry, m.serveErrors, m.clientRefused, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Finished counts a patch on demand that ended (imagepatch.Resolver.Finished).
func (m *Metrics) Finished(r imagepatch.Resolution, d time.Duration) {
	m.patches.WithLabelValues(string(r.State)).Inc()
	m.patchDur.Observe(d.Seconds())
}

func (m *Metrics) certRenewal(result string) { m.certRenewals.WithLabelValues(result).Inc() }

// WatchCaches exports what sizes says as oomguard_webhook_cache_entries{cache}
// (imagepatch.Resolver.Sizes): each stays at or below --cache-size.
func (m *Metrics) WatchCaches(sizes func() map[string]int) {
	m.Registry.MustRegister(&cacheCollector{sizes, prometheus.NewDesc("oomguard_webhook_cache_entries",
		"Entries in each of the webhook's caches (tags, patched, results, failed, repositories: at most --cache-size each) and of its work in flight (lookups, patches).",
		[]string{"cache"}, nil)})
}

type cacheCollector struct {
	sizes func() map[string]int
	desc  *prometheus.Desc
}

func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	for name, n := range c.sizes() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), name)
	}
}
