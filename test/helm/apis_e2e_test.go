//go:build e2e

package helm

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// Each kind of an optional API (the Prometheus Operator's, cert-manager's)
// is rendered only where the cluster serves it; enabled where it does not,
// the chart refuses, naming the value to turn off, what to install and
// what helm template must be told.
func TestE2EChartOptionalAPIs(t *testing.T) {
	webhook := []string{"imagepatchWebhook.enabled=true", "imagepatchWebhook.images={r.example/base/*}"}
	for _, tc := range []struct {
		set     []string
		value   string
		install string
		apis    []string
		kinds   map[string]int
	}{
		{[]string{"podMonitor.enabled=true"}, "podMonitor.enabled", "the Prometheus Operator's CRDs",
			[]string{"monitoring.coreos.com/v1/PodMonitor"}, map[string]int{"PodMonitor": 1}},
		{append([]string{"podMonitor.enabled=true", "nodeAgent.enabled=false"}, webhook...), "podMonitor.enabled", "the Prometheus Operator's CRDs",
			[]string{"monitoring.coreos.com/v1/PodMonitor"}, map[string]int{"PodMonitor": 1}},
		{[]string{"prometheusRule.enabled=true"}, "prometheusRule.enabled", "the Prometheus Operator's CRDs",
			[]string{"monitoring.coreos.com/v1/PrometheusRule"}, map[string]int{"PrometheusRule": 1}},
		{append([]string{"imagepatchWebhook.tls.certManager=true"}, webhook...), "imagepatchWebhook.tls.certManager", "cert-manager",
			[]string{"cert-manager.io/v1/Issuer", "cert-manager.io/v1/Certificate"}, map[string]int{"Issuer": 2, "Certificate": 2}},
	} {
		args := []string{"template", "oomguard", chart, "--namespace", "ops"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		_, stderr, err := run(t, "helm", args...)
		if err == nil || !strings.Contains(stderr, tc.value+": this cluster serves no ") || !strings.Contains(stderr, "Install "+tc.install) ||
			!strings.Contains(stderr, "set "+tc.value+"=false") || !strings.Contains(stderr, "--api-versions "+tc.apis[len(tc.apis)-1]) {
			t.Errorf("%v without its API: %v %s, want refused, naming %s, %s and --api-versions %s", tc.set, err, stderr, tc.value, tc.install, tc.apis[len(tc.apis)-1])
		}
		// Both of cert-manager's kinds are needed: one alone is refused too.
		if len(tc.apis) > 1 {
			if _, stderr, err := run(t, "helm", append(args, "--api-versions", tc.apis[0])...); err == nil || !strings.Contains(stderr, tc.value) {
				t.Errorf("%v with %s alone: %v %s", tc.set, tc.apis[0], err, stderr)
			}
		}
		for _, api := range tc.apis {
			args = append(args, "--api-versions", api)
		}
		kinds := map[string]int{}
		for _, j := range documents(t, tool(t, "helm", args...)) {
			var head header
			if err := json.Unmarshal(j, &head); err != nil {
				t.Fatal(err)
			}
			kinds[head.Kind]++
		}
		for k, n := range tc.kinds {
			if kinds[k] != n {
				t.Errorf("%v with %v: %d %s, want %d", tc.set, tc.apis, kinds[k], k, n)
			}
		}
	}
	// Enabled with nothing to watch (no node agent, no webhook): nothing to render, nothing refused.
	tool(t, "helm", "template", "oomguard", chart, "--set", "nodeAgent.enabled=false", "--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true")
}

// Each alert only where what it watches is deployed: no plugin's alert
// where no plugin runs (hook mode, uninstall, a release of the webhook
// alone), which would fire for ever (OomguardPluginMetricsAbsent); the
// webhook's with the webhook.
func TestE2EChartAlertsWhereDeployed(t *testing.T) {
	alerts := func(set ...string) (out []string) {
		args := []string{"template", "oomguard", chart, "--namespace", "ops", "--set", "prometheusRule.enabled=true",
			"--api-versions", "monitoring.coreos.com/v1/PrometheusRule"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		for _, j := range documents(t, tool(t, "helm", args...)) {
			var r prometheusRule
			if json.Unmarshal(j, &r) != nil || r.Kind != "PrometheusRule" {
				continue
			}
			for _, g := range r.Spec.Groups {
				for _, rule := range g.Rules {
					out = append(out, rule.Alert)
				}
			}
		}
		return out
	}
	has := func(list []string, prefix string) bool {
		for _, a := range list {
			if strings.HasPrefix(a, prefix) {
				return true
			}
		}
		return false
	}
	webhook := []string{"imagepatchWebhook.enabled=true", "imagepatchWebhook.images={r.example/base/*}"}
	for _, tc := range []struct {
		set                     []string
		plugin, doctor, webhook bool
	}{
		{nil, true, true, false},
		{[]string{"doctor.enabled=false"}, true, false, false},
		{[]string{"mode=hook"}, false, true, false},
		{[]string{"mode=uninstall"}, false, true, false},
		{append([]string{"nodeAgent.enabled=false"}, webhook...), false, false, true},
		{webhook, true, true, true},
	} {
		a := alerts(tc.set...)
		if has(a, "OomguardPlugin") != tc.plugin || has(a, "OomguardDoctor") != tc.doctor || has(a, "OomguardWebhook") != tc.webhook {
			t.Errorf("%v: alerts %v, want the plugin's %v, the doctor's %v, the webhook's %v", tc.set, a, tc.plugin, tc.doctor, tc.webhook)
		}
	}
}

// ciValues are the chart's deploy/helm/oomguard/ci/*-values.yaml, one a
// feature set (chart-testing's convention).
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chart, "ci", "*-values.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("the chart's ci values: %v %v", files, err)
	}
	return files
}

// optionalAPIs are what a cluster with the Prometheus Operator and
// cert-manager serves besides Kubernetes' own.
var optionalAPIs = []string{"--api-versions", "monitoring.coreos.com/v1/PodMonitor", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
	"--api-versions", "cert-manager.io/v1/Issuer", "--api-versions", "cert-manager.io/v1/Certificate"}

// Each ci values file passes `helm lint --strict` and renders, on the
// oldest Kubernetes the chart supports and the newest tested, every object
// decoding strictly into its type (test/chartci validates them on a real
// API server).
func TestE2EChartCIValues(t *testing.T) {
	for _, f := range ciValues(t) {
		for _, kube := range []string{"1.28.0", "1.37.0"} {
			t.Run(filepath.Base(f)+"@"+kube, func(t *testing.T) {
				tool(t, "helm", "lint", "--strict", chart, "-f", f, "--kube-version", kube)
				args := append([]string{"template", "ci", chart, "--namespace", "oomguard-ci", "-f", f, "--kube-version", kube}, optionalAPIs...)
				if kube == "1.37.0" {
					args = append(args, "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
				}
				if o := objects(t, tool(t, "helm", args...)); len(o) < 4 {
					t.Fatalf("%d kinds rendered", len(o))
				}
			})
		}
	}
}
