package hook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

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
name = "system"
[rule.match]
namespaces = ["kube-system"]

[[rule]]
name = "init"
oom_score_adj = 900
oom_group = false
[rule.match]
command = '(^|/)(systemd|init)$'
`

// A container as kubelet and containerd lay it out with the systemd driver.
const (
	podSlice    = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c.slice"
	ctrCgroup   = podSlice + "/cri-containerd-abc.scope"
	cgroupsPath = "kubepods-burstable-pod1f2e3d4c.slice:cri-containerd:abc"
)

// node is a host's /proc and /sys/fs/cgroup under a directory, given to the
// hook as --root: the test decides where each process is, without root.
type node struct {
	t    *testing.T
	root string
	v2   bool
	next int
}

func newNode(t *testing.T, v2 bool) *node {
	n := &node{t: t, root: t.TempDir(), v2: v2, next: 1000}
	if v2 {
		n.write("sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n")
	} else {
		n.write("sys/fs/cgroup/memory/tasks", "")
		n.write("sys/fs/cgroup/unified/cgroup.controllers", "")
	}
	return n
}

func (n *node) write(p, content string) {
	n.t.Helper()
	full := filepath.Join(n.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) read(p string) string {
	b, _ := os.ReadFile(filepath.Join(n.root, p))
	return string(b)
}

// proc adds a process in cgroup cg (its memory.oom.group 1 on v2) at score adj.
func (n *node) proc(cg string, adj int) int {
	n.next++
	pid := n.next
	line := "0::" + cg + "\n"
	if !n.v2 {
		line = "4:memory:" + cg + "\n0::/\n"
	}
	n.write(fmt.Sprintf("proc/%d/cgroup", pid), line)
	n.write(fmt.Sprintf("proc/%d/oom_score_adj", pid), fmt.Sprintf("%d\n", adj))
	if n.v2 {
		n.write("sys/fs/cgroup"+cg+"/memory.oom.group", "1\n")
	}
	return pid
}

func (n *node) score(pid int) int {
	n.t.Helper()
	v, err := strconv.Atoi(strings.TrimSpace(n.read(fmt.Sprintf("proc/%d/oom_score_adj", pid))))
	if err != nil {
		n.t.Fatal(err)
	}
	return v
}

func (n *node) group(cg string) string {
	return strings.TrimSpace(n.read("sys/fs/cgroup" + cg + "/memory.oom.group"))
}

type env struct {
	t       *testing.T
	dir     string
	cfg     string
	logPath string
	node    *node
}

func newEnv(t *testing.T, extra string) *env {
	return newEnvOn(t, newNode(t, true), extra)
}

func newEnvOn(t *testing.T, n *node, extra string) *env {
	e := &env{t: t, dir: t.TempDir(), node: n}
	e.logPath = filepath.Join(e.dir, "log", "hook.log")
	e.cfg = filepath.Join(e.dir, "config.toml")
	if err := os.WriteFile(e.cfg, []byte(fmt.Sprintf(testPolicy, e.logPath)+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// containerd is what containerd's CRI writes about a container in namespace ns.
func containerd(ns string) map[string]string {
	return map[string]string{
		"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-namespace": ns,
		"io.kubernetes.cri.sandbox-name": "nb-0", "io.kubernetes.cri.container-name": "main",
		"io.kubernetes.cri.image-name": "registry.example/ml/nb:1",
	}
}

// crio is what CRI-O writes about a container in namespace ns.
func crio(ns string) map[string]string {
	labels, _ := json.Marshal(map[string]string{"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": "nb-0",
		"io.kubernetes.container.name": "main", "io.kubernetes.pod.uid": "1f2e3d4c"})
	return map[string]string{
		"io.kubernetes.cri-o.ContainerType": "container", "io.kubernetes.cri-o.Labels": string(labels),
		"io.kubernetes.cri-o.Image": "registry.example/ml/nb:1", "io.kubernetes.cri-o.ImageName": "registry.example/ml/nb:1",
		"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": "nb-0", "io.kubernetes.container.name": "main",
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

var bundles int

// bundle writes a bundle whose spec runs args with annotations ann in the
// container cgroup cgroupsPath.
func (e *env) bundle(args []string, ann map[string]string) string {
	return e.bundleIn(cgroupsPath, args, ann)
}

func (e *env) bundleIn(cgPath string, args []string, ann map[string]string) string {
	e.t.Helper()
	bundles++
	b := filepath.Join(e.dir, fmt.Sprintf("bundle%d", bundles))
	if err := os.MkdirAll(b, 0o755); err != nil {
		e.t.Fatal(err)
	}
	sp := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: args}, Annotations: ann,
		Linux: &specs.Linux{CgroupsPath: cgPath}}
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

// run executes the built hook on the node and returns its exit code, stderr
// and log records. A hook that hangs fails the test after a minute.
func (e *env) run(stdin string, args ...string) (int, string, []map[string]any) {
	e.t.Helper()
	return e.runWith(strings.NewReader(stdin), args...)
}

func (e *env) runWith(stdin interface{ Read([]byte) (int, error) }, args ...string) (int, string, []map[string]any) {
	e.t.Helper()
	if st, err := os.Lstat(e.logPath); err == nil && st.Mode().IsRegular() {
		os.Remove(e.logPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hookBin, append([]string{"--config", e.cfg, "--root", e.node.root}, args...)...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		e.t.Fatalf("the hook hung: killed after a minute; stderr %q", stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	var recs []map[string]any
	var data []byte
	if st, err := os.Lstat(e.logPath); err == nil && st.Mode().IsRegular() {
		data, _ = os.ReadFile(e.logPath)
	}
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

func logged(recs []map[string]any, level, substr string) bool {
	for _, r := range recs {
		if r["level"] == level && (strings.Contains(fmt.Sprint(r["msg"]), substr) || strings.Contains(fmt.Sprint(r["err"]), substr)) {
			return true
		}
	}
	return false
}

func TestHookSetsMatchedContainer(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "cgroup v2", false: "cgroup v1"}[v2], func(t *testing.T) {
			e := newEnvOn(t, newNode(t, v2), "")
			pid := e.node.proc(ctrCgroup, -997)
			code, stderr, recs := e.run(state(pid, e.bundle([]string{"/sbin/init"}, containerd("ml"))))
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if got := e.node.score(pid); got != 900 {
				t.Fatalf("oom_score_adj = %d, want 900", got)
			}
			d := find(recs, "decision")
			if d == nil || d["rule"] != "init" || d["namespace"] != "ml" || d["pod"] != "nb-0" || d["container"] != "main" ||
				d["oom_score_adj"] != "-997→900" {
				t.Fatalf("decision log: %v", recs)
			}
			if v2 && (e.node.group(ctrCgroup) != "0" || d["oom_group"] != "1→0") {
				t.Fatalf("memory.oom.group %q, log %v", e.node.group(ctrCgroup), d)
			}
			if !v2 && !strings.Contains(d["oom_group"].(string), "unsupported") {
				t.Fatalf("on a cgroup v1 host the group must be reported unsupported: %v", d)
			}
			// A second run finds nothing to do.
			if _, _, recs := e.run(state(pid, e.bundle([]string{"/sbin/init"}, nil))); find(recs, "decision")["oom_score_adj"] != "unchanged 900" {
				t.Fatalf("second run: %v", recs)
			}
		})
	}
}

func TestHookLeavesUnmatchedContainer(t *testing.T) {
	e := newEnv(t, "")
	pid := e.node.proc(ctrCgroup, 500)
	code, _, recs := e.run(state(pid, e.bundle([]string{"/usr/bin/python3"}, nil)))
	if code != 0 || e.node.score(pid) != 500 || e.node.group(ctrCgroup) != "1" {
		t.Fatalf("exit %d, score %d, group %s", code, e.node.score(pid), e.node.group(ctrCgroup))
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
			pid := e.node.proc(ctrCgroup, -997)
			code, _, recs := e.run(state(pid, e.bundle([]string{"/sbin/init"}, with(containerd(tc.ns), "oomguard.io/oom-score-adj", tc.value))))
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if got := e.node.score(pid); got != tc.want {
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
pod_labels = { "io.kubernetes.container.name" = "main" }
`)
	pid := e.node.proc(ctrCgroup, 500)
	code, _, recs := e.run(state(pid, e.bundle([]string{"/bin/sh"}, with(crio("ml"),
		"io.kubernetes.cri-o.Annotations", `{"oomguard.io/oom-score-adj":"750"}`))))
	if code != 0 || e.node.score(pid) != 750 {
		t.Fatalf("exit %d, score %d, log %v", code, e.node.score(pid), recs)
	}
	if d := find(recs, "decision"); d["rule"] != "labelled" || d["namespace"] != "ml" || d["runtime"] != "cri-o" {
		t.Fatalf("decision %v", d)
	}
	// Malformed JSON in those annotations is logged and skipped.
	pid = e.node.proc(ctrCgroup, 500)
	code, _, recs = e.run(state(pid, e.bundle([]string{"/bin/sh", "x"}, with(crio("ml"),
		"io.kubernetes.cri-o.Labels", `{"app":`, "io.kubernetes.cri-o.Annotations", `[1]`))))
	if code != 0 || find(recs, "ignoring malformed annotation") == nil || find(recs, "decision") == nil {
		t.Fatalf("exit %d, log %v", code, recs)
	}
}

// A pod controls its annotations; only the runtime's own keys name it. On
// CRI-O, which copies pod annotations into the spec, a pod in "ml" that
// claims containerd's kube-system keys must not be trusted, and must not
// escape its namespace's rules either.
func TestHookIdentityCannotBeForged(t *testing.T) {
	forged := []string{
		"io.kubernetes.cri.sandbox-namespace", "kube-system", "io.kubernetes.cri.sandbox-name", "coredns",
		"io.kubernetes.cri.container-name", "coredns", "io.kubernetes.cri.image-name", "registry.k8s.io/coredns",
		"io.kubernetes.cri.runtime-handler", "sysbox-runc", "io.kubernetes.cri-o.RuntimeHandler", "sysbox-runc",
		"oomguard.io/oom-score-adj", "100",
	}
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		bundle  string // a bundle directory as the runtime names it; "" for the test's own
		wantNS  string
		runtime string
	}{
		{"CRI-O copies the pod's forged containerd keys", with(crio("ml"), forged...), "", "ml", "cri-o"},
		{"containerd passes CRI-O keys through: its bundle decides", with(with(containerd("ml"), forged[12:]...), "io.kubernetes.cri-o.ContainerType", "container",
			"io.kubernetes.cri-o.Labels", `{"io.kubernetes.pod.namespace":"kube-system"}`), "/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc", "ml", "containerd"},
		{"both runtimes' keys and no telling bundle: untrusted", with(with(containerd("ml"), forged[12:]...), "io.kubernetes.cri-o.ContainerType", "container",
			"io.kubernetes.cri-o.Labels", `{"io.kubernetes.pod.namespace":"kube-system"}`), "", "", "unknown"},
		{"no runtime's keys (podman, runc): untrusted", map[string]string{"io.kubernetes.pod.namespace": "kube-system", "oomguard.io/oom-score-adj": "100"}, "", "", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			pid := e.node.proc(ctrCgroup, -997)
			b := e.bundle([]string{"/sbin/init"}, tc.ann)
			if tc.bundle != "" {
				// The runtime's bundle path, as a link to the test's bundle.
				link := filepath.Join(e.dir, tc.bundle)
				os.MkdirAll(filepath.Dir(link), 0o755)
				os.Symlink(b, link)
				b = link
			}
			code, _, recs := e.run(state(pid, b))
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			d := find(recs, "decision")
			if got := e.node.score(pid); got != 900 || d["namespace"] != tc.wantNS || d["runtime"] != tc.runtime || d["rule"] != "init" {
				t.Fatalf("score %d (want the rule's 900), decision %v", got, d)
			}
			for _, k := range []string{"pod", "container"} {
				if d[k] == "coredns" {
					t.Fatalf("forged %s taken: %v", k, d)
				}
			}
			if rej := find(recs, "annotation rejected"); rej == nil || !strings.Contains(rej["reason"].(string), "below 900") {
				t.Fatalf("the low score annotation must be rejected: %v", recs)
			}
		})
	}
}

// The hook writes only inside one container: its cgroup below a pod's, the
// pid in it. Everything else is refused, and nothing is written.
func TestHookContainment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cgPath  string // the spec's cgroupsPath
		procCg  string // where the state's pid really is; "" for no /proc/PID/cgroup
		refused string
	}{
		{"root cgroup", "/", "/", "not one container's cgroup"},
		{"relative escape", "../../..", "/", "not one container's cgroup"},
		{"kubepods itself", "/kubepods.slice", "/kubepods.slice", "not one container's cgroup"},
		{"a pod's cgroup, above its containers", podSlice, podSlice, "not one container's cgroup"},
		{"a system service", "/system.slice/sshd.service", "/system.slice/sshd.service", "not one container's cgroup"},
		{"pid outside the spec's cgroup", cgroupsPath, "/system.slice/sshd.service", "is not in the container's cgroup"},
		{"pid in another container", cgroupsPath, podSlice + "/cri-containerd-other.scope", "is not in the container's cgroup"},
		{"pid's cgroup unreadable", cgroupsPath, "", "pid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			pid := e.node.proc(tc.procCg, -997)
			if tc.procCg == "" {
				os.Remove(filepath.Join(e.node.root, fmt.Sprintf("proc/%d/cgroup", pid)))
			}
			e.node.write("sys/fs/cgroup/memory.oom.group", "1\n")
			e.node.write("sys/fs/cgroup"+podSlice+"/memory.oom.group", "1\n")
			code, _, recs := e.run(state(pid, e.bundleIn(tc.cgPath, []string{"/sbin/init"}, nil)))
			if code != 0 || !logged(recs, "ERROR", tc.refused) {
				t.Fatalf("exit %d; want a refusal naming %q: %v", code, tc.refused, recs)
			}
			if e.node.score(pid) != -997 || e.node.read("sys/fs/cgroup/memory.oom.group") != "1\n" || e.node.group(podSlice) != "1" {
				t.Fatalf("written outside a container: score %d, root group %q, pod group %q", e.node.score(pid),
					e.node.read("sys/fs/cgroup/memory.oom.group"), e.node.group(podSlice))
			}
			if code, stderr, _ := e.run(state(pid, e.bundleIn(tc.cgPath, []string{"/sbin/init"}, nil)), "--strict"); code != 1 || !strings.Contains(stderr, tc.refused) {
				t.Fatalf("strict: exit %d, stderr %q", code, stderr)
			}
		})
	}
}

func TestHookBadInputs(t *testing.T) {
	e := newEnv(t, "")
	pid := e.node.proc(ctrCgroup, -997)
	good := e.bundle([]string{"/sbin/init"}, nil)
	noConfig := filepath.Join(e.dir, "empty-bundle")
	os.MkdirAll(noConfig, 0o755)
	badConfig := filepath.Join(e.dir, "bad-bundle")
	os.MkdirAll(badConfig, 0o755)
	os.WriteFile(filepath.Join(badConfig, "config.json"), []byte("{not json"), 0o644)
	gonePid := 99999 // no such process on the node

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
		{"pid exited", state(gonePid, good), "pid " + strconv.Itoa(gonePid)},
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

// Files the hook reads or writes may be anything: a FIFO, a link to a device,
// 100 MB. None may block the hook or run it out of memory: it fails open (or
// closed under strict) and names the file.
func TestHookHostileFiles(t *testing.T) {
	mkfifo := func(t *testing.T, p string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env, bundle string)
		want  string
	}{
		{"config.json is a FIFO", func(t *testing.T, e *env, b string) {
			os.Remove(filepath.Join(b, "config.json"))
			mkfifo(t, filepath.Join(b, "config.json"))
		}, "not a regular file"},
		{"config.json links to /dev/zero", func(t *testing.T, e *env, b string) {
			os.Remove(filepath.Join(b, "config.json"))
			os.Symlink("/dev/zero", filepath.Join(b, "config.json"))
		}, "not a regular file"},
		{"config.json is 100 MB", func(t *testing.T, e *env, b string) {
			os.Truncate(filepath.Join(b, "config.json"), 100<<20)
		}, "too large"},
		{"the configuration is a FIFO", func(t *testing.T, e *env, b string) {
			os.Remove(e.cfg)
			mkfifo(t, e.cfg)
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			pid := e.node.proc(ctrCgroup, -997)
			b := e.bundle([]string{"/sbin/init"}, nil)
			tc.setup(t, e, b)
			code, stderr, recs := e.run(state(pid, b), "--log-file", "stderr")
			if code != 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 0 and %q in stderr %q, log %v", code, tc.want, stderr, recs)
			}
			if code, stderr, _ := e.run(state(pid, b), "--strict", "--log-file", "stderr"); code != 1 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("strict: exit %d, stderr %q", code, stderr)
			}
			if e.node.score(pid) != -997 {
				t.Fatal("adjusted from an unreadable input")
			}
		})
	}
	t.Run("the log file is a FIFO", func(t *testing.T) {
		e := newEnv(t, "")
		pid := e.node.proc(ctrCgroup, -997)
		mkfifo(t, e.logPath)
		code, stderr, _ := e.run(state(pid, e.bundle([]string{"/sbin/init"}, nil)))
		if code != 0 || !strings.Contains(stderr, "log file unavailable") || e.node.score(pid) != 900 {
			t.Fatalf("exit %d, score %d, stderr %q", code, e.node.score(pid), stderr)
		}
	})
	t.Run("stdin never ends", func(t *testing.T) {
		e := newEnv(t, "")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer r.Close()
		code, stderr, _ := e.runWith(r, "--log-file", "stderr", "--deadline", "1s")
		if code != 0 || !strings.Contains(stderr, "deadline") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		code, stderr, _ = e.runWith(r, "--log-file", "stderr", "--deadline", "1s", "--strict")
		if code != 1 || !strings.Contains(stderr, "deadline") {
			t.Fatalf("strict: exit %d, stderr %q", code, stderr)
		}
	})
}

func TestHookBadConfig(t *testing.T) {
	n := newNode(t, true)
	dir := t.TempDir()
	e := newEnvOn(t, n, "")
	pid := n.proc(ctrCgroup, -997)
	b := e.bundle([]string{"/sbin/init"}, nil)
	invalid := filepath.Join(dir, "invalid.toml")
	os.WriteFile(invalid, []byte("[[rule]]\nname='x'\noom_score_adj=5000\n"), 0o644)
	unreadable := filepath.Join(dir, "dir.toml")
	os.MkdirAll(unreadable, 0o755)
	kernel := filepath.Join(dir, "kmsg.toml") // a read of /proc/kmsg waits for the kernel's next message
	if f, err := os.Open("/proc/kmsg"); err == nil {
		f.Close()
		os.Symlink("/proc/kmsg", kernel)
	} else {
		os.Symlink("/proc/self/status", kernel)
	}

	for _, tc := range []struct{ name, cfg, want string }{
		{"invalid", invalid, "oom_score_adj 5000"},
		{"unreadable", unreadable, "read config " + unreadable},
		{"kernel interface", kernel, "on procfs"},
		{"missing", filepath.Join(dir, "missing.toml"), "missing.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				args := []string{"--config", tc.cfg, "--log-file", "stderr", "--root", n.root}
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
			if n.score(pid) == 900 {
				t.Fatal("a bad config must not apply anything")
			}
		})
	}
}

// strict = true in a configuration that does not validate still fails
// closed: the operator asked for it, and the broken file says so.
func TestHookStrictInBrokenConfig(t *testing.T) {
	n := newNode(t, true)
	e := newEnvOn(t, n, "")
	pid := n.proc(ctrCgroup, -997)
	for _, text := range []string{
		"strict = true\n[[rule]]\nname='x'\noom_score_adj=5000\n",
		"strict = true\n[log]\nlevel = \n",
	} {
		os.WriteFile(e.cfg, []byte(text), 0o644)
		cmd := exec.Command(hookBin, "--config", e.cfg, "--root", n.root)
		cmd.Stdin = strings.NewReader(state(pid, e.bundle([]string{"/sbin/init"}, nil)))
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "configuration unusable") {
			t.Fatalf("%q: %v, output %s", text, err, out)
		}
	}
}

// The group write path, on a cgroup v2 tree given as --root; the real kernel
// path is exercised in the VM tests.
func TestHookGroupOnV2Tree(t *testing.T) {
	e := newEnv(t, "")
	pid := e.node.proc(ctrCgroup, -997)
	code, _, recs := e.run(state(pid, e.bundle([]string{"/lib/systemd/systemd"}, nil)))
	if code != 0 {
		t.Fatalf("exit %d: %v", code, recs)
	}
	if e.node.group(ctrCgroup) != "0" || e.node.score(pid) != 900 {
		t.Fatalf("memory.oom.group %q, oom_score_adj %d", e.node.group(ctrCgroup), e.node.score(pid))
	}
	if d := find(recs, "decision"); d["oom_group"] != "1→0" || d["oom_score_adj"] != "-997→900" {
		t.Fatalf("decision log: %v", d)
	}
	// The cgroup vanished between creation and the hook.
	os.RemoveAll(filepath.Join(e.node.root, "sys/fs/cgroup", ctrCgroup))
	e.node.write(fmt.Sprintf("proc/%d/oom_score_adj", pid), "-997\n")
	code, _, recs = e.run(state(pid, e.bundle([]string{"/lib/systemd/systemd"}, nil)))
	if code != 0 || !logged(recs, "ERROR", "memory.oom.group") {
		t.Fatalf("vanished cgroup: exit %d, log %v", code, recs)
	}
	if e.node.score(pid) != 900 {
		t.Fatal("the score must still be set when the cgroup is gone")
	}
}
