//go:build e2e

package helm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/prometheus/promql/parser"
)

// The chart's PrometheusRule and Grafana dashboard: every expression
// parses as PromQL, and every series it reads is one the built plugin and
// doctor export (scraped from the binaries, not listed by hand).
func TestE2EChartAlertsAndDashboard(t *testing.T) {
	exported := exportedSeries(t)
	check := func(where, expr string) {
		t.Helper()
		e, err := parser.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			return
		}
		n := 0
		parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				n++
				if !exported[vs.Name] {
					t.Errorf("%s: %s reads %s, which nothing exports", where, expr, vs.Name)
				}
			}
			return nil
		})
		if n == 0 {
			t.Errorf("%s: %q reads no series", where, expr)
		}
	}

	out := tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "--set", "prometheusRule.enabled=true",
		"--set", "prometheusRule.labels.release=kps", "--set", "grafanaDashboard.enabled=true", "--set", "doctor.interval=1h30m")
	var alerts []string
	for _, j := range documents(t, out) {
		var o struct {
			Kind     string
			Metadata struct{ Labels map[string]string }
			Data     map[string]string
			Spec     struct {
				Groups []struct {
					Name  string
					Rules []struct {
						Alert, Expr, For string
						Labels           map[string]string
						Annotations      map[string]string
					}
				}
			}
		}
		if err := json.Unmarshal(j, &o); err != nil {
			t.Fatal(err)
		}
		switch {
		case o.Kind == "PrometheusRule":
			if o.Metadata.Labels["release"] != "kps" {
				t.Errorf("the rule's labels %v", o.Metadata.Labels)
			}
			for _, g := range o.Spec.Groups {
				for _, r := range g.Rules {
					alerts = append(alerts, r.Alert)
					check("alert "+r.Alert, r.Expr)
					if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
						t.Errorf("alert %s: severity %q, summary %q, description %q", r.Alert, r.Labels["severity"], r.Annotations["summary"], r.Annotations["description"])
					}
					checkRunbook(t, r.Alert, r.Annotations["runbook_url"])
					if r.For != "" {
						if _, err := time.ParseDuration(r.For); err != nil {
							t.Errorf("alert %s: for %q", r.Alert, r.For)
						}
					}
				}
			}
			if stale := fmt.Sprint(o.Spec.Groups); !strings.Contains(stale, "3 * 5400") {
				t.Errorf("the doctor's staleness is not three of its 1h30m intervals: %s", stale)
			}
		case o.Kind == "ConfigMap" && o.Data["oomguard.json"] != "":
			if o.Metadata.Labels["grafana_dashboard"] != "1" {
				t.Errorf("the dashboard's labels %v", o.Metadata.Labels)
			}
			var d struct {
				Panels []struct {
					Title   string
					Targets []struct{ Expr string }
				}
			}
			if err := json.Unmarshal([]byte(o.Data["oomguard.json"]), &d); err != nil || len(d.Panels) == 0 {
				t.Fatalf("the dashboard: %v", err)
			}
			grafana := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
			for _, p := range d.Panels {
				for _, tg := range p.Targets {
					check("panel "+p.Title, grafana.Replace(tg.Expr))
				}
			}
		}
	}
	want := []string{"OomguardPluginDisconnected", "OomguardPluginDown", "OomguardPluginMetricsAbsent", "OomguardRuntimeRestartPending", "OomguardRuntimeRestartFailed", "OomguardErrors", "OomguardConfigInvalid",
		"OomguardNodeDaemonOOMKilled", "OomguardDoctorCritical", "OomguardDoctorStale"}
	if fmt.Sprint(alerts) != fmt.Sprint(want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// exportedSeries is every series name the built plugin serves (not
// connected to any runtime: its series exist from the start) and the
// doctor writes for node_exporter.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	bin := filepath.Join(repo, "bin")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	plugin := exec.Command(filepath.Join(bin, "oomguard-nri"), "--socket", filepath.Join(t.TempDir(), "nri.sock"), "--metrics-address", addr,
		"--config", filepath.Join(repo, "deploy/config.toml"))
	if err := plugin.Start(); err != nil {
		t.Fatalf("%v: run make build", err)
	}
	defer func() {
		plugin.Process.Kill()
		plugin.Wait()
	}()
	var metrics []byte
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			metrics, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's metrics: %v", err)
		}
	}
	doctor, err := exec.Command(filepath.Join(bin, "oomguard-doctor"), "--prometheus").Output()
	if err != nil && len(doctor) == 0 {
		t.Fatalf("oomguard-doctor --prometheus: %v", err)
	}
	names := map[string]bool{}
	for _, text := range [][]byte{metrics, doctor} {
		sc := bufio.NewScanner(strings.NewReader(string(text)))
		for sc.Scan() {
			l := sc.Text()
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			names[strings.FieldsFunc(l, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
		}
	}
	for _, n := range []string{"oomguard_nri_connected", "oomguard_doctor_severity"} {
		if !names[n] {
			t.Fatalf("%s is not exported: the scrape is broken", n)
		}
	}
	// Labelled by the killed pod and container: no series before a kill,
	// so read from where the kill reports (internal/oomkills) make it.
	src, err := os.ReadFile(filepath.Join(repo, "internal/oomkills/metrics.go"))
	if err != nil || !strings.Contains(string(src), `Name: "oomguard_oom_kills_total"`) {
		t.Fatalf("the kill reports no longer make oomguard_oom_kills_total: %v", err)
	}
	names["oomguard_oom_kills_total"] = true
	names["up"] = true // Prometheus' own, for each target it scrapes
	return names
}

// checkRunbook: an alert's runbook_url is a page of docs/ and one of its
// headings, as GitHub anchors them.
func checkRunbook(t *testing.T, alert, url string) {
	t.Helper()
	const base = "https://github.com/oomguard/oomguard/blob/main/docs/"
	page, anchor, ok := strings.Cut(strings.TrimPrefix(url, base), "#")
	if !strings.HasPrefix(url, base) || !ok {
		t.Errorf("alert %s: runbook_url %q, want %sPAGE#SECTION", alert, url, base)
		return
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
	if err != nil {
		t.Errorf("alert %s: runbook_url %q: %v", alert, url, err)
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok && githubAnchor(strings.TrimLeft(h, "# ")) == anchor {
			return
		}
	}
	t.Errorf("alert %s: runbook_url %q: %s has no heading anchored #%s", alert, url, page, anchor)
}

// githubAnchor is the anchor GitHub gives a heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
