//go:build e2e

package helm

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// The chart's PrometheusRule and Grafana dashboard: every expression
// parses as PromQL, and every series it reads is one the built plugin,
// doctor and webhook export (scraped from the binaries, not listed by
// hand), selected by label values they export.
func TestE2EChartAlertsAndDashboard(t *testing.T) {
	exported, values := exportedSeries(t)
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
				for _, m := range vs.LabelMatchers {
					known := values[vs.Name][m.Name]
					if len(known) == 0 || m.Type == labels.MatchNotEqual || m.Type == labels.MatchNotRegexp {
						continue // a label whose values come with events, or the target's (namespace, pod)
					}
					if !slices.ContainsFunc(known, m.Matches) {
						t.Errorf("%s: %s selects %s, which matches none of %s's values %v", where, expr, m, vs.Name, known)
					}
				}
			}
			return nil
		})
		if n == 0 {
			t.Errorf("%s: %q reads no series", where, expr)
		}
	}

	out := tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "--set", "prometheusRule.enabled=true",
		"--set", "prometheusRule.labels.release=kps", "--set", "grafanaDashboard.enabled=true", "--set", "doctor.interval=1h30m",
		"--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={r.example/base/*}",
		"--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
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
		"OomguardNodeDaemonOOMKilled", "OomguardDoctorCritical", "OomguardDoctorStale",
		"OomguardWebhookErrors", "OomguardWebhookDeadlineHits", "OomguardWebhookPatchFailures", "OomguardWebhookMetricsAbsent"}
	if fmt.Sprint(alerts) != fmt.Sprint(want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// exportedSeries is every series name the built plugin serves (not
// connected to any runtime: its series exist from the start), the doctor
// writes for node_exporter and the webhook serves (with a certificate and
// no registry), and each series' label values: name → label → values.
func exportedSeries(t *testing.T) (map[string]bool, map[string]map[string][]string) {
	t.Helper()
	bin := filepath.Join(repo, "bin")
	metrics := scrape(t, "oomguard_nri_connected", func(addr string) *exec.Cmd {
		return exec.Command(filepath.Join(bin, "oomguard-nri"), "--socket", filepath.Join(t.TempDir(), "nri.sock"), "--metrics-address", addr,
			"--config", filepath.Join(repo, "deploy/config.toml"))
	})
	cert, key := selfSigned(t)
	webhook := scrape(t, "oomguard_webhook_build_info", func(addr string) *exec.Cmd {
		return exec.Command(filepath.Join(bin, "imagepatch"), "webhook", "--images", "r.example/base/*", "--tls-cert-file", cert, "--tls-key-file", key,
			"--listen", "127.0.0.1:0", "--metrics-address", addr)
	})
	doctor, err := exec.Command(filepath.Join(bin, "oomguard-doctor"), "--prometheus").Output()
	if err != nil && len(doctor) == 0 {
		t.Fatalf("oomguard-doctor --prometheus: %v", err)
	}
	names := map[string]bool{}
	values := map[string]map[string][]string{}
	for _, text := range [][]byte{metrics, doctor, webhook} {
		sc := bufio.NewScanner(strings.NewReader(string(text)))
		for sc.Scan() {
			l := sc.Text()
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			name := strings.FieldsFunc(l, func(r rune) bool { return r == '{' || r == ' ' })[0]
			names[name] = true
			series, err := parser.ParseMetric(l[:strings.LastIndexByte(l, ' ')])
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			series.Range(func(lb labels.Label) {
				if values[name] == nil {
					values[name] = map[string][]string{}
				}
				if lb.Name != "__name__" && !slices.Contains(values[name][lb.Name], lb.Value) {
					values[name][lb.Name] = append(values[name][lb.Name], lb.Value)
				}
			})
		}
	}
	for _, n := range []string{"oomguard_nri_connected", "oomguard_doctor_severity", "oomguard_webhook_reviews_total"} {
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
	return names, values
}

// scrape starts a program serving /metrics at the address it is given and
// returns its metrics once they hold want.
func scrape(t *testing.T, want string, command func(addr string) *exec.Cmd) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := command(addr)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: run make build", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			metrics, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && strings.Contains(string(metrics), want) {
				return metrics
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's metrics at %s: %v\n%s", filepath.Base(cmd.Path), addr, err, log.String())
		}
	}
}

// selfSigned writes a serving certificate and its key for the webhook.
func selfSigned(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
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
