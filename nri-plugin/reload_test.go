package nriplugin

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/test/syncbuf"
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
	score := func() int { return p.cfg.Load().Rules[0].OOMScoreAdj.Value }
	seen := config.Hash([]byte(strings.Replace(ruleAt, "%s", "900", 1)))
	if got := testutil.ToFloat64(m.configInfo.WithLabelValues(seen, "file")); got != 1 {
		t.Fatalf("config_info{hash=%s,source=file} = %v at the start", seen, got)
	}
	r := p.newReloader(path)

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
		settle(t, r)
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
	settle(t, r)
	if score() != 800 || !strings.Contains(logs.String(), "configuration file gone") {
		t.Fatalf("file removed: score %d, logged %q", score(), logs.String())
	}
	if code, body := get(t, addr); code != 503 || !strings.Contains(body, "is gone") {
		t.Fatalf("file removed: /healthz %d %q, want 503 saying it is gone", code, body)
	}
	write("800")
	settle(t, r)
	if code, body := get(t, addr); code != 200 || gathered(t, m, "oomguard_config_valid") != 1 {
		t.Fatalf("file back: /healthz %d %q", code, body)
	}
}

// settle steps the reloader until no read waits for its confirmation: a
// changed file takes two steps, an unchanged one one.
func settle(t *testing.T, r *reloader) {
	t.Helper()
	for i := 0; r.step(); i++ {
		if i == 2 {
			t.Fatal("the reloader never settles on a file that does not change")
		}
	}
}

// A file written in place (truncated, then written in steps) is never put
// in force half-written or empty: only a read that the next one finds the
// same, whole, is taken, and an empty file never.
func TestReloadTakesOnlyAWholeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	full := func(score string) string { return strings.Replace(ruleAt, "%s", score, 1) }
	os.WriteFile(path, []byte(full("900")), 0o644)
	cfg, _ := config.Load(path)
	var logs bytes.Buffer
	m := NewMetrics()
	p := New(Options{Config: cfg, Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m})
	r := p.newReloader(path)
	whole := func() bool { // the rule in force is a whole one: 900 or 700, for vms only
		rs := p.cfg.Load().Rules
		return len(rs) == 1 && len(rs[0].Match.Namespaces) == 1
	}
	next := full("700")
	lines := strings.SplitAfter(strings.TrimSuffix(next, "\n"), "\n")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The writer's steps: truncated, then one line at a time. The
	// reloader reads between them, once: each read differs from the one
	// before, and none is taken.
	for i := 0; i <= len(lines); i++ {
		if i > 0 {
			f.WriteString(lines[i-1])
		}
		if !r.step() && i < len(lines) {
			t.Fatalf("after %d lines: the read was not left waiting for its confirmation", i)
		}
		if !whole() || gathered(t, m, "oomguard_config_valid") != 1 {
			t.Fatalf("after %d of %d lines: rules in force %+v, valid %v", i, len(lines), p.cfg.Load().Rules, gathered(t, m, "oomguard_config_valid"))
		}
		if p.cfg.Load().Rules[0].OOMScoreAdj.Value != 900 {
			t.Fatalf("after %d of %d lines: taken before a second read confirmed it", i, len(lines))
		}
	}
	settle(t, r)
	if !whole() || p.cfg.Load().Rules[0].OOMScoreAdj.Value != 700 {
		t.Fatalf("the whole file was not taken: %+v", p.cfg.Load().Rules)
	}

	// A file left empty is refused, said so, and the rules in force stay.
	f.Truncate(0)
	logs.Reset()
	settle(t, r)
	if !whole() || p.cfg.Load().Rules[0].OOMScoreAdj.Value != 700 || gathered(t, m, "oomguard_config_valid") != 0 ||
		!strings.Contains(logs.String(), "empty") {
		t.Fatalf("an empty file: rules %+v, valid %v, log %q", p.cfg.Load().Rules, gathered(t, m, "oomguard_config_valid"), logs.String())
	}
	// And one with only white space.
	f.WriteAt([]byte("\n\n  \n"), 0)
	settle(t, r)
	if !whole() || gathered(t, m, "oomguard_config_valid") != 0 {
		t.Fatalf("a blank file: rules %+v", p.cfg.Load().Rules)
	}
	os.WriteFile(path, []byte(full("600")), 0o644)
	settle(t, r)
	if p.cfg.Load().Rules[0].OOMScoreAdj.Value != 600 || gathered(t, m, "oomguard_config_valid") != 1 {
		t.Fatal("a whole file after an empty one was not taken")
	}
}

// A plugin that started with an empty file runs with no rules, and says the
// file cannot be used.
func TestReloadEmptyAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(path, nil, 0o644)
	cfg, err := config.Load(path) // the one-shot readers' rule: the defaults
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	p := New(Options{Config: cfg, Root: t.TempDir(), Log: slog.New(slog.DiscardHandler), Metrics: m})
	p.newReloader(path)
	if gathered(t, m, "oomguard_config_valid") != 0 || m.badConfig.Load() == nil || !strings.Contains(*m.badConfig.Load(), "empty") {
		t.Fatalf("started on an empty file: valid %v", gathered(t, m, "oomguard_config_valid"))
	}
}

// A file that cannot be a configuration — not a regular file, too large, a
// kernel interface whose read blocks — in place of the configuration keeps
// the one in force, and config_valid, /healthz and the log say which; the
// reloader never waits on it, and a good file is taken after it.
func TestReloadUnusableFile(t *testing.T) {
	var kmsg string
	if f, err := os.Open("/proc/kmsg"); err == nil { // root: its read blocks once the log is read
		f.Close()
		kmsg = "/proc/kmsg"
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		why  string
	}{
		{"FIFO", func(t *testing.T, path string) { mustDo(t, syscall.Mkfifo(path, 0o644)) }, "not a regular file (a FIFO)"},
		{"directory", func(t *testing.T, path string) { mustDo(t, os.Mkdir(path, 0o755)) }, "not a regular file (a directory)"},
		{"1 GiB sparse file", func(t *testing.T, path string) {
			f, err := os.Create(path)
			mustDo(t, err)
			mustDo(t, f.Truncate(1<<30))
			f.Close()
		}, "too large"},
		{"link to /dev/zero", func(t *testing.T, path string) { mustDo(t, os.Symlink("/dev/zero", path)) }, "not a regular file (a character device)"},
		{"link to /proc/kmsg, or another procfs file", func(t *testing.T, path string) {
			mustDo(t, os.Symlink(cmp.Or(kmsg, "/proc/self/status"), path))
		}, "a kernel interface, not a file of data: on procfs"},
		{"link to a sysfs file", func(t *testing.T, path string) {
			if _, err := os.Stat("/sys/kernel/uevent_seqnum"); err != nil {
				t.Skip("no sysfs here")
			}
			mustDo(t, os.Symlink("/sys/kernel/uevent_seqnum", path))
		}, "on sysfs"},
		{"empty file", func(t *testing.T, path string) { mustDo(t, os.WriteFile(path, nil, 0o644)) }, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			good := func(score string) {
				os.RemoveAll(path)
				mustDo(t, os.WriteFile(path, []byte(strings.Replace(ruleAt, "%s", score, 1)), 0o644))
			}
			good("900")
			cfg, _ := config.Load(path)
			logs := &syncbuf.Buffer{}
			m := NewMetrics()
			p := New(Options{Config: cfg, Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(logs, nil)), Metrics: m})
			p.m.setConnected(true)
			addr := serveMetrics(t, m)
			r := p.newReloader(path)
			os.Remove(path)
			tc.make(t, path)
			done := make(chan struct{})
			go func() { defer close(done); r.step(); r.step() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second): // no benchmark: a bound on noticing a read that hangs
				t.Fatal("the reloader hangs on the file")
			}
			if v := gathered(t, m, "oomguard_config_valid"); v != 0 || p.cfg.Load().Rules[0].OOMScoreAdj.Value != 900 {
				t.Fatalf("config_valid %v, score in force %d; want 0 and the last good 900", v, p.cfg.Load().Rules[0].OOMScoreAdj.Value)
			}
			if code, body := get(t, addr); code != 503 || !strings.Contains(body, tc.why) {
				t.Fatalf("/healthz %d %q, want 503 saying %q", code, body, tc.why)
			}
			if !strings.Contains(logs.String(), "configuration file cannot be used; keeping the configuration in force") || !strings.Contains(logs.String(), tc.why) {
				t.Fatalf("log: %s", logs.String())
			}
			good("800")
			settle(t, r)
			if code, _ := get(t, addr); code != 200 || p.cfg.Load().Rules[0].OOMScoreAdj.Value != 800 {
				t.Fatalf("a good file after it: /healthz %d, score %d", code, p.cfg.Load().Rules[0].OOMScoreAdj.Value)
			}
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// nri.* settings and the log's are taken at the start: a reloaded file that
// changes them says which, with the value in force and the file's, and the
// gauge counts them; one a command-line flag sets is the flag's.
func TestReloadReportsSettingsFixedAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	const start = "[nri]\nsocket = '/run/a.sock'\nreload_interval = '10s'\n" + ruleAt
	write := func(text string) { os.WriteFile(path, []byte(strings.Replace(text, "%s", "900", 1)), 0o644) }
	write(start)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NRI.MetricsAddress = "10.0.0.1:9741" // --metrics-address, as the DaemonSet passes it
	var logs bytes.Buffer
	m := NewMetrics()
	p := New(Options{Config: cfg, Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Metrics: m})
	r := p.newReloader(path)
	for _, step := range []struct {
		name, text string
		want       []string // key, in force, file
		not        []string
	}{
		{"unchanged but for a rule", strings.Replace(start, "vms", "vm2", 1), nil, []string{"a restart of the plugin applies it"}},
		{"socket, index, interval, level", "strict = true\n[log]\nlevel = 'debug'\n[nri]\nsocket = '/run/b.sock'\nplugin_index = '20'\nreload_interval = '5s'\n" + ruleAt,
			[]string{"key=nri.socket in_force=/run/a.sock file=/run/b.sock", "key=nri.plugin_index in_force=10 file=20",
				"key=nri.reload_interval in_force=10s file=5s", "key=log.level in_force=info file=debug"},
			[]string{"key=strict", "level=WARN msg=\"setting changed in the file is fixed at start; a restart of the plugin applies it\" key=nri.metrics_address"}},
		{"back", start, nil, []string{"restart"}},
	} {
		logs.Reset()
		write(step.text)
		settle(t, r)
		if !strings.Contains(logs.String(), "configuration reloaded") {
			t.Fatalf("%s: not reloaded: %s", step.name, logs.String())
		}
		for _, w := range step.want {
			if !strings.Contains(logs.String(), w) || !strings.Contains(logs.String(), "a restart of the plugin applies it") {
				t.Errorf("%s: no %q in the log:\n%s", step.name, w, logs.String())
			}
		}
		for _, w := range step.not {
			if strings.Contains(logs.String(), w) {
				t.Errorf("%s: %q in the log:\n%s", step.name, w, logs.String())
			}
		}
		if v := gathered(t, m, "oomguard_config_restart_needed"); v != float64(len(step.want)) {
			t.Errorf("%s: oomguard_config_restart_needed %v, want %d", step.name, v, len(step.want))
		}
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
	for deadline := time.Now().Add(10 * time.Second); p.cfg.Load().Rules[0].OOMScoreAdj.Value != 700; time.Sleep(10 * time.Millisecond) {
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
		"oomguard_adjustments_total":              16,
		"oomguard_drift_corrections_total":        2,
		"oomguard_errors_total":                   11,
		"oomguard_refused_writes_total":           11,
		"oomguard_reconciled_total":               3,
		"oomguard_config_reloads_total":           2,
		"oomguard_node_daemon_oom_kills_total":    1,
		"oomguard_node_oom_kills_predicted_total": 2,
	} {
		if n := testutil.CollectAndCount(m.reg, name); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "oomguard_config_valid", "oomguard_config_info", "oomguard_config_restart_needed",
		"oomguard_node_lock_held", "oomguard_plugin_restarts_total"} {
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
