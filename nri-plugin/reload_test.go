package nriplugin

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oomguard/oomguard/config"
)

const ruleAt = `[[rule]]
name = "vm"
oom_score_adj = %s
[rule.match]
namespaces = ["vms"]
`

// A changed configuration is put in force without a restart; one that does
// not validate is logged and counted, /healthz and the gauge say so, and
// the last good one stays in force; fixed, it is taken again.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	write := func(score string) {
		if err := os.WriteFile(path+".tmp", []byte(strings.Replace(ruleAt, "%s", score, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Rename(path+".tmp", path) // as kubelet swaps a ConfigMap volume's files
	}
	write("900")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	m := NewMetrics()
	p := New(Options{Config: cfg, Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m})
	p.m.setConnected(true)
	addr := serveMetrics(t, m)
	score := func() int { return *p.cfg.Load().Rules[0].OOMScoreAdj }
	seen := config.Hash([]byte(strings.Replace(ruleAt, "%s", "900", 1)))
	if got := testutil.ToFloat64(m.configInfo.WithLabelValues(seen, "file")); got != 1 {
		t.Fatalf("config_info{hash=%s,source=file} = %v at the start", seen, got)
	}

	for _, step := range []struct {
		name, score string
		want        int
		valid       float64
		healthz     int
		log         string
	}{
		{"unchanged", "900", 900, 1, 200, ""},
		{"changed", "850", 850, 1, 200, "configuration reloaded"},
		{"invalid", "9000", 850, 0, 503, "configuration changed but invalid; keeping the one in force"},
		{"still invalid, not reported again", "9000", 850, 0, 503, ""},
		{"fixed", "800", 800, 1, 200, "configuration reloaded"},
	} {
		logs.Reset()
		write(step.score)
		seen = p.reload(path, seen)
		if score() != step.want || gathered(t, m, "oomguard_config_valid") != step.valid {
			t.Fatalf("%s: score %d valid %v, want %d and %v", step.name, score(), gathered(t, m, "oomguard_config_valid"), step.want, step.valid)
		}
		if code, body := get(t, addr); code != step.healthz {
			t.Fatalf("%s: /healthz %d %q, want %d", step.name, code, body, step.healthz)
		}
		if (step.log == "") != (logs.Len() == 0) || !strings.Contains(logs.String(), step.log) {
			t.Fatalf("%s: logged %q, want %q", step.name, logs.String(), step.log)
		}
	}
	if s, f := testutil.ToFloat64(m.reloads.WithLabelValues("success")), testutil.ToFloat64(m.reloads.WithLabelValues("failure")); s != 2 || f != 1 {
		t.Fatalf("reloads: %v succeeded, %v failed; want 2 and 1", s, f)
	}
	if n := testutil.CollectAndCount(m.configInfo); n != 1 {
		t.Fatalf("%d oomguard_config_info series, want the one in force", n)
	}
	os.Remove(path)
	logs.Reset()
	p.reload(path, seen)
	if score() != 800 || !strings.Contains(logs.String(), "configuration file gone") {
		t.Fatalf("file removed: score %d, logged %q", score(), logs.String())
	}
}

// The watcher reads the file on its own, and stops with its context.
func TestWatchConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(path, []byte(strings.Replace(ruleAt, "%s", "900", 1)), 0o644)
	cfg, _ := config.Load(path)
	p := New(Options{Config: cfg, Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: NewMetrics()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.watchConfig(ctx, path, 10*time.Millisecond); close(done) }()
	os.WriteFile(path, []byte(strings.Replace(ruleAt, "%s", "700", 1)), 0o644)
	for deadline := time.Now().Add(10 * time.Second); *p.cfg.Load().Rules[0].OOMScoreAdj != 700; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the changed configuration was not put in force")
		}
	}
	cancel()
	<-done
}

// Alerts need series before the first event: every labelled counter with
// known labels exists from the start, and the Go and process collectors.
func TestSeriesExistFromTheStart(t *testing.T) {
	m := NewMetrics()
	New(Options{Config: config.Default(), Root: t.TempDir(), Log: slog.New(slog.DiscardHandler), Metrics: m})
	for name, want := range map[string]int{
		"oomguard_adjustments_total":              10,
		"oomguard_drift_corrections_total":        2,
		"oomguard_errors_total":                   9,
		"oomguard_refused_writes_total":           9,
		"oomguard_config_reloads_total":           2,
		"oomguard_node_daemon_oom_kills_total":    1,
		"oomguard_node_oom_kills_predicted_total": 2,
	} {
		if n := testutil.CollectAndCount(m.reg, name); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "oomguard_config_valid", "oomguard_config_info"} {
		if testutil.CollectAndCount(m.reg, name) == 0 {
			t.Errorf("no %s", name)
		}
	}
}

func serveMetrics(t *testing.T, m *Metrics) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.Serve(ctx, addr, slog.New(slog.DiscardHandler))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatal("metrics not served")
		}
	}
}

func get(t *testing.T, addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
