package oomkills

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the kill reports' counters; the plugin registers them.
type Metrics struct {
	kills        *prometheus.CounterVec
	daemonKills  *prometheus.CounterVec
	unattributed *prometheus.CounterVec
	kmsgLost     prometheus.Counter
	killLag      prometheus.Histogram
	predictions  *prometheus.CounterVec
}

// NewMetrics makes the counters, with the series alerts need before the first kill.
func NewMetrics() *Metrics {
	m := &Metrics{
		kills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_oom_kills_total",
			Help: "OOM kills the kernel logged in pods, by namespace, pod, container (empty when the runtime did not name it) and kind (container, parent, limit, node, unknown); a container's series go when it is removed."},
			[]string{"namespace", "pod", "container", "kind"}),
		daemonKills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_node_daemon_oom_kills_total",
			Help: "OOM kills of processes outside every pod (node daemons: sshd, kubelet, the runtime, …), by kind."}, []string{"kind"}),
		unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_oom_kills_unattributed_total",
			Help: "OOM kills that could have been in more than one container (a record the kernel's rate limit dropped, names that read two ways, the process gone), by kind: the log names the candidates."}, []string{"kind"}),
		kmsgLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_kernel_log_lost_total",
			Help: "Times the kernel overwrote log records before they were read; OOM kills among them were not reported."}),
		killLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "oomguard_oom_kill_report_delay_seconds",
			Help: "From the kernel's OOM kill record to oomguard's report of it.", Buckets: []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 10}}),
		predictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_node_oom_kills_predicted_total",
			Help: "Global OOM kills by whether the kernel's victim was the doctor's model's first (predicted=true: no survivor outranked it by oom_badness; unknown: /proc could not be read)."},
			[]string{"predicted"}),
	}
	m.daemonKills.WithLabelValues(KillNode)
	m.unattributed.WithLabelValues(KillLimit)
	m.predictions.WithLabelValues("true")
	m.predictions.WithLabelValues("false")
	return m
}

// Collectors are the counters, to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.kills, m.daemonKills, m.unattributed, m.kmsgLost, m.killLag, m.predictions}
}

// Forget drops a removed container's series: labels by container keep the
// series count to the node's containers that were OOM-killed in.
func (m *Metrics) Forget(namespace, pod, container string) {
	m.kills.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "pod": pod, "container": container})
}
