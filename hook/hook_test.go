package hook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/testbin"
)

var hookBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "oomguard-hook-test")
	if err != nil {
		panic(err)
	}
	hookBin, err = testbin.Program(dir, "oomguard-hook")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testPolicy = `
[log]
format = "json"
level = "debug"
file = %q

[annotations]
trusted_namespaces = ["kube-system"]

[[rule]]
name = "init"
oom_score_adj = 900
oom_group = false
[rule.match]
command = '(^|/)(systemd|init)$'
`

type env struct {
	t       *testing.T
	dir     string
	cfg     string
	logPath string
}

func newEnv(t *testing.T, extra string) *env {
	e := &env{t: t, dir: t.TempDir()}
	e.logPath = filepath.Join(e.dir, "log", "hook.log")
	e.cfg = filepath.Join(e.dir, "config.toml")
	if err := os.WriteFile(e.cfg, []byte(fmt.Sprintf(testPolicy, e.logPath)+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// victim starts a process the hook can adjust, standing in for the container's init.
func victim(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func (e *env) bundle(args []string, ann map[string]string) string {
	e.t.Helper()
	b := filepath.Join(e.dir, fmt.Sprintf("bundle%d", len(args)+len(ann)))
	if err := os.MkdirAll(b, 0o755); err != nil {
		e.t.Fatal(err)
	}
	sp := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: args}, Annotations: ann,
		Linux: &specs.Linux{CgroupsPath: "/oomguard-test"}}
	data, _ := json.Marshal(sp)
	if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return b
}

func state(pid int, bundle string) string {
	b, _ := json.Marshal(specs.State{Version: specs.Version, ID: "ctr-1", Status: specs.StateCreating, Pid: pid, Bundle: bundle})
	return string(b)
}

// run executes the built hook and returns its exit code, stderr and log records.
func (e *env) run(stdin string, args ...string) (int, string, []map[string]any) {
	e.t.Helper()
	os.Remove(e.logPath)
	cmd := exec.Command(hookBin, append([]string{"--config", e.cfg}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	var recs []map[string]any
	data, _ := os.ReadFile(e.logPath)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			e.t.Fatalf("log line is not JSON: %q", line)
		}
		recs = append(recs, r)
	}
	return code, stderr.String(), recs
}

func find(recs []map[string]any, msg string) map[string]any {
	for _, r := range recs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

func score(t *testing.T, pid int) int {
	t.Helper()
	v, err := kernel.ReadOOMScoreAdj("/", pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHookSetsMatchedContainer(t *testing.T) {
	e := newEnv(t, "")
	pid := victim(t)
	code, stderr, recs := e.run(state(pid, e.bundle([]string{"/sbin/init"}, map[string]string{
		"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": "nb-0", "io.kubernetes.cri.container-name": "main",
	})))
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if got := score(t, pid); got != 900 {
		t.Fatalf("oom_score_adj = %d, want 900", got)
	}
	d := find(recs, "decision")
	if d == nil || d["rule"] != "init" || d["namespace"] != "ml" || d["pod"] != "nb-0" || d["container"] != "main" ||
		!strings.HasSuffix(d["oom_score_adj"].(string), "→900") {
		t.Fatalf("decision log: %v", recs)
	}
	if mode := kernel.DetectMode("/"); mode != kernel.ModeV2 && !strings.Contains(d["oom_group"].(string), "unsupported") {
		t.Fatalf("on a cgroup %s host the group must be reported unsupported: %v", mode, d)
	}
	// A second run finds nothing to do.
	if _, _, recs := e.run(state(pid, e.bundle([]string{"/sbin/init"}, nil))); find(recs, "decision")["oom_score_adj"] != "unchanged 900" {
		t.Fatalf("second run: %v", recs)
	}
}

func TestHookLeavesUnmatchedContainer(t *testing.T) {
	e := newEnv(t, "")
	pid := victim(t)
	before := score(t, pid)
	code, _, recs := e.run(state(pid, e.bundle([]string{"/usr/bin/python3"}, nil)))
	if code != 0 || score(t, pid) != before {
		t.Fatalf("exit %d, score %d → %d", code, before, score(t, pid))
	}
	if d := find(recs, "decision"); d == nil || d["rule"] != "" || d["oom_score_adj"] != "left" {
		t.Fatalf("decision log: %v", recs)
	}
}

func TestHookAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ns     string
		value  string
		want   int
		reason string // in the rejection log line; "" for accepted
	}{
		{"raise", "ml", "950", 950, ""},
		{"not a number", "ml", "abc", 900, "not an integer"},
		{"out of range", "ml", "5000", 900, "out of range"},
		{"immunity untrusted", "ml", "-1000", 900, "below 900"},
		{"lower untrusted", "ml", "100", 900, "below 900"},
		{"lower trusted", "kube-system", "100", 100, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			pid := victim(t)
			code, _, recs := e.run(state(pid, e.bundle([]string{"/sbin/init"}, map[string]string{
				"io.kubernetes.pod.namespace": tc.ns, "oomguard.io/oom-score-adj": tc.value,
			})))
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if got := score(t, pid); got != tc.want {
				t.Fatalf("oom_score_adj = %d, want %d; log %v", got, tc.want, recs)
			}
			rej := find(recs, "annotation rejected")
			if tc.reason == "" && rej != nil {
				t.Fatalf("unexpected rejection %v", rej)
			}
			if tc.reason != "" && (rej == nil || !strings.Contains(rej["reason"].(string), tc.reason) || rej["value"] != tc.value) {
				t.Fatalf("want a rejection naming %q, got %v", tc.reason, recs)
			}
		})
	}
}

func TestHookCRIOAnnotationsAndLabels(t *testing.T) {
	e := newEnv(t, `
[[rule]]
name = "labelled"
oom_score_adj = 700
[rule.match]
pod_labels = { app = "nb" }
`)
	pid := victim(t)
	code, _, recs := e.run(state(pid, e.bundle([]string{"/bin/sh"}, map[string]string{
		"io.kubernetes.cri-o.Labels":      `{"app":"nb"}`,
		"io.kubernetes.cri-o.Annotations": `{"oomguard.io/oom-score-adj":"750"}`,
	})))
	if code != 0 || score(t, pid) != 750 {
		t.Fatalf("exit %d, score %d, log %v", code, score(t, pid), recs)
	}
	// Malformed JSON in those annotations is logged and skipped.
	pid = victim(t)
	code, _, recs = e.run(state(pid, e.bundle([]string{"/bin/sh", "x"}, map[string]string{
		"io.kubernetes.cri-o.Labels": `{"app":`, "io.kubernetes.cri-o.Annotations": `[1]`,
	})))
	if code != 0 || find(recs, "ignoring malformed annotation") == nil || find(recs, "decision") == nil {
		t.Fatalf("exit %d, log %v", code, recs)
	}
}

func TestHookBadInputs(t *testing.T) {
	e := newEnv(t, "")
	pid := victim(t)
	good := e.bundle([]string{"/sbin/init"}, nil)
	noConfig := filepath.Join(e.dir, "empty-bundle")
	os.MkdirAll(noConfig, 0o755)
	badConfig := filepath.Join(e.dir, "bad-bundle")
	os.MkdirAll(badConfig, 0o755)
	os.WriteFile(filepath.Join(badConfig, "config.json"), []byte("{not json"), 0o644)

	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	gonePid := exited.Process.Pid

	for _, tc := range []struct {
		name, stdin, want string
	}{
		{"empty stdin", "", "empty stdin"},
		{"garbage JSON", "{{{", "parse OCI state"},
		{"no pid", `{"ociVersion":"1.0.2","id":"x","bundle":"/tmp"}`, "has no pid"},
		{"no bundle", fmt.Sprintf(`{"ociVersion":"1.0.2","id":"x","pid":%d}`, pid), "has no bundle"},
		{"missing bundle", state(pid, filepath.Join(e.dir, "nope")), "read bundle config"},
		{"missing config.json", state(pid, noConfig), "read bundle config"},
		{"bad config.json", state(pid, badConfig), "parse " + badConfig},
		{"pid exited", state(gonePid, good), "oom_score_adj of pid " + strconv.Itoa(gonePid)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, recs := e.run(tc.stdin)
			if code != 0 {
				t.Fatalf("fail open: exit %d, want 0", code)
			}
			if !logged(recs, "ERROR", tc.want) {
				t.Fatalf("want an error log containing %q, got %v", tc.want, recs)
			}
			code, stderr, recs := e.run(tc.stdin, "--strict")
			if code != 1 || !strings.Contains(stderr, tc.want) || !logged(recs, "ERROR", "strict mode") {
				t.Fatalf("strict: exit %d, stderr %q, log %v", code, stderr, recs)
			}
		})
	}
}

func TestHookBadConfig(t *testing.T) {
	dir := t.TempDir()
	pid := victim(t)
	b := filepath.Join(dir, "b")
	os.MkdirAll(b, 0o755)
	os.WriteFile(filepath.Join(b, "config.json"), []byte(`{"process":{"args":["/sbin/init"]}}`), 0o644)
	invalid := filepath.Join(dir, "invalid.toml")
	os.WriteFile(invalid, []byte("[[rule]]\nname='x'\noom_score_adj=5000\n"), 0o644)
	unreadable := filepath.Join(dir, "dir.toml")
	os.MkdirAll(unreadable, 0o755)

	for _, tc := range []struct{ name, cfg, want string }{
		{"invalid", invalid, "oom_score_adj 5000"},
		{"unreadable", unreadable, "read config " + unreadable},
		{"missing", filepath.Join(dir, "missing.toml"), "missing.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				args := []string{"--config", tc.cfg, "--log-file", "stderr"}
				if strict {
					args = append(args, "--strict")
				}
				cmd := exec.Command(hookBin, args...)
				cmd.Stdin = strings.NewReader(state(pid, b))
				out, err := cmd.CombinedOutput()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				}
				if (strict && code != 1) || (!strict && code != 0) {
					t.Fatalf("strict=%v: exit %d, output %s", strict, code, out)
				}
				if !strings.Contains(string(out), tc.want) {
					t.Fatalf("strict=%v: output %q does not name %q", strict, out, tc.want)
				}
			}
			if score(t, pid) == 900 {
				t.Fatal("a bad config must not apply anything")
			}
		})
	}
}

func logged(recs []map[string]any, level, substr string) bool {
	for _, r := range recs {
		if r["level"] == level && (strings.Contains(fmt.Sprint(r["msg"]), substr) || strings.Contains(fmt.Sprint(r["err"]), substr)) {
			return true
		}
	}
	return false
}

// The group write path, on a cgroup v2 tree given as --root; the real kernel
// path is exercised in the VM tests.
func TestHookGroupOnV2Tree(t *testing.T) {
	e := newEnv(t, "")
	root := t.TempDir()
	const cg = "kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"
	files := map[string]string{
		"sys/fs/cgroup/cgroup.controllers":          "memory",
		"sys/fs/cgroup/" + cg + "/memory.oom.group": "1\n",
		"proc/42/cgroup":                            "0::/" + cg + "\n",
		"proc/42/oom_score_adj":                     "-997\n",
	}
	for p, c := range files {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	code, _, recs := e.run(state(42, e.bundle([]string{"/lib/systemd/systemd"}, nil)), "--root", root)
	if code != 0 {
		t.Fatalf("exit %d: %v", code, recs)
	}
	got, _ := os.ReadFile(filepath.Join(root, "sys/fs/cgroup", cg, "memory.oom.group"))
	adj, _ := os.ReadFile(filepath.Join(root, "proc/42/oom_score_adj"))
	if string(got) != "0\n" || string(adj) != "900\n" {
		t.Fatalf("memory.oom.group %q, oom_score_adj %q", got, adj)
	}
	if d := find(recs, "decision"); d["oom_group"] != "1→0" || d["oom_score_adj"] != "-997→900" {
		t.Fatalf("decision log: %v", d)
	}
	// The cgroup vanished between creation and the hook.
	os.RemoveAll(filepath.Join(root, "sys/fs/cgroup", cg))
	os.WriteFile(filepath.Join(root, "proc/42/oom_score_adj"), []byte("-997\n"), 0o644)
	code, _, recs = e.run(state(42, e.bundle([]string{"/lib/systemd/systemd"}, nil)), "--root", root)
	if code != 0 || !logged(recs, "ERROR", "memory.oom.group") {
		t.Fatalf("vanished cgroup: exit %d, log %v", code, recs)
	}
	if adj, _ := os.ReadFile(filepath.Join(root, "proc/42/oom_score_adj")); string(adj) != "900\n" {
		t.Fatal("the score must still be set when the cgroup is gone")
	}
}
