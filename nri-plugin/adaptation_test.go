package nriplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
)

func startRuntime(t *testing.T, dir string, pods []*api.PodSandbox, ctrs []*api.Container) *nriruntime.Runtime {
	t.Helper()
	rt, err := nriruntime.Start(dir, pods, ctrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	return rt
}

// testPlugin connects our plugin to the runtime side, as the DaemonSet does.
type testPlugin struct {
	p      *Plugin
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func connectPlugin(t *testing.T, dir, cfgText, root string) *testPlugin {
	return connectPluginAt(t, filepath.Join(dir, "nri.sock"), cfgText, root)
}

func connectPluginAt(t *testing.T, socket, cfgText, root string) *testPlugin {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	cfg.NRI.Socket = socket
	cfg.NRI.VerifyInterval.Duration = 0
	tp := &testPlugin{logs: &syncBuffer{}, done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(tp.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tp.p = New(cfg, nil, root, log, NewMetrics())
	ctx, cancel := context.WithCancel(context.Background())
	tp.cancel = cancel
	go func() { defer close(tp.done); tp.p.Serve(ctx, cfg.NRI, false) }()
	t.Cleanup(func() { cancel(); <-tp.done })
	tp.waitConnected(t, true)
	return tp
}

func (tp *testPlugin) waitConnected(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for tp.p.m.isConnected.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("plugin connected=%v never became %v; log:\n%s", !want, want, tp.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const shippedConfig = "../deploy/config.toml"

func readShipped(t *testing.T) string {
	b, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func nriDir(t *testing.T) string {
	// Short: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "oomguard-nri-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func adjusted(rsp *api.CreateContainerResponse) (score string, group string) {
	score, group = "untouched", "untouched"
	lin := rsp.GetAdjust().GetLinux()
	if v := lin.GetOomScoreAdj(); v != nil {
		score = fmt.Sprint(v.GetValue())
	}
	if v, ok := lin.GetResources().GetUnified()["memory.oom.group"]; ok {
		group = v
	}
	return score, group
}

// v2Node is an empty cgroup v2 node.
func v2Node(t *testing.T) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sys/fs/cgroup"), 0o755)
	os.WriteFile(filepath.Join(root, "sys/fs/cgroup/cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
	return root
}

func TestCreateContainer(t *testing.T) {
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	tp := connectPlugin(t, dir, readShipped(t), v2Node(t))

	for _, tc := range []struct {
		name         string
		pod          *api.PodSandbox
		score        int
		args         []string
		wantScore    string
		wantGroup    string
		wantRejected string
	}{
		{"guaranteed systemd", nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil), -997, []string{"/lib/systemd/systemd"}, "900", "0", ""},
		{"besteffort app", nriruntime.KubeletPod("2", "ml", "besteffort", "runc", nil), 1000, []string{"/app"}, "untouched", "untouched", ""},
		{"sysbox", nriruntime.KubeletPod("3", "ml", "burstable", "sysbox-runc", nil), 500, []string{"/bin/bash"}, "900", "0", ""},
		{"kube-system init", nriruntime.KubeletPod("4", "kube-system", "guaranteed", "runc", nil), -997, []string{"/sbin/init"}, "untouched", "untouched", ""},
		{"hostile immunity", nriruntime.KubeletPod("5", "ml", "guaranteed", "runc", map[string]string{"oomguard.io/oom-score-adj": "-1000"}), -997, []string{"/sbin/init"}, "900", "0", "below 900"},
		{"hostile garbage", nriruntime.KubeletPod("6", "ml", "guaranteed", "runc", map[string]string{"oomguard.io/oom-score-adj": strings.Repeat("9", 4096)}), -997, []string{"/sbin/init"}, "900", "0", "not an integer"},
		{"hostile group", nriruntime.KubeletPod("7", "ml", "guaranteed", "runc", map[string]string{"oomguard.io/oom-group": "yes please"}), -997, []string{"/sbin/init"}, "900", "0", "not a boolean"},
		{"annotation raises", nriruntime.KubeletPod("8", "ml", "guaranteed", "runc", map[string]string{"oom-score-adj.oomguard.io/container.main": "990"}), -997, []string{"/sbin/init"}, "990", "0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rsp, err := rs.Create(tc.pod, nriruntime.KubeletContainer(tc.pod, "main", tc.score, tc.args...))
			if err != nil {
				t.Fatalf("the container must be created: %v", err)
			}
			score, group := adjusted(rsp)
			if score != tc.wantScore || group != tc.wantGroup {
				t.Fatalf("adjusted score %s group %s, want %s %s", score, group, tc.wantScore, tc.wantGroup)
			}
			if tc.wantRejected != "" && !strings.Contains(tp.logs.String(), tc.wantRejected) {
				t.Fatalf("no rejection %q in the log:\n%s", tc.wantRejected, tp.logs.String())
			}
		})
	}
	logs := tp.logs.String()
	if !strings.Contains(logs, `msg=decision phase=create pod=ml/pod-1 container=main rule=init-as-pid1 oom_score_adj=-997→900 oom_group=1→0`) {
		t.Fatalf("decision line missing:\n%s", logs)
	}
}

func TestUpdateContainerKeepsGroupOff(t *testing.T) {
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	connectPlugin(t, dir, readShipped(t), v2Node(t))
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	if _, err := rs.Create(pod, ctr); err != nil {
		t.Fatal(err)
	}
	// A resize, as kubelet sends it: new limits and memory.oom.group = 1 again.
	limit := int64(2 << 30)
	rsp, err := rs.Update(pod, ctr, &api.LinuxResources{Memory: &api.LinuxMemory{Limit: &api.OptionalInt64{Value: limit}},
		Unified: map[string]string{"memory.oom.group": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	var mine *api.ContainerUpdate
	for _, u := range rsp.GetUpdate() {
		if u.GetContainerId() == ctr.Id {
			mine = u
		}
	}
	res := mine.GetLinux().GetResources()
	if res.GetUnified()["memory.oom.group"] != "0" || res.GetMemory().GetLimit().GetValue() != limit {
		t.Fatalf("update for the container: %v", res)
	}
	// An unguarded container's resize is not touched.
	other := nriruntime.KubeletContainer(pod, "sidecar", -997, "/app")
	if _, err := rs.Create(pod, other); err != nil {
		t.Fatal(err)
	}
	rsp, err = rs.Update(pod, other, &api.LinuxResources{Unified: map[string]string{"memory.oom.group": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rsp.GetUpdate() {
		if g := u.GetLinux().GetResources().GetUnified()["memory.oom.group"]; u.GetContainerId() == other.Id && g != "1" {
			t.Fatalf("unguarded container's update changed to %q", g)
		}
	}
}

// fixtureNode is a cgroup v2 tree with running containers and their processes.
func fixtureNode(t *testing.T, ctrs []*api.Container, pidsPer int) string {
	t.Helper()
	root := t.TempDir()
	write := func(p, c string) {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/fs/cgroup/cgroup.controllers", "cpu memory pids")
	pid := 1000
	for _, c := range ctrs {
		cg := strings.TrimPrefix(mustResolve(t, c.Linux.CgroupsPath), "/")
		write("sys/fs/cgroup/"+cg+"/memory.oom.group", "1\n")
		var procs []string
		for i := 0; i < pidsPer; i++ {
			pid++
			procs = append(procs, fmt.Sprint(pid))
			write(fmt.Sprintf("proc/%d/oom_score_adj", pid), fmt.Sprintf("%d\n", c.Linux.OomScoreAdj.Value))
			write(fmt.Sprintf("proc/%d/cgroup", pid), "0::/"+cg+"\n")
		}
		write("sys/fs/cgroup/"+cg+"/cgroup.procs", strings.Join(procs, "\n")+"\n")
	}
	return root
}

func TestSynchronizeFixesExistingContainers(t *testing.T) {
	dir := nriDir(t)
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range 3 {
		pod := nriruntime.KubeletPod(fmt.Sprint(i), "ml", "guaranteed", "runc", nil)
		pods = append(pods, pod)
		args := "/sbin/init"
		if i == 2 {
			args = "/app" // not guarded
		}
		ctrs = append(ctrs, nriruntime.KubeletContainer(pod, "main", -997, args))
	}
	root := fixtureNode(t, ctrs, 3)
	rs := startRuntime(t, dir, pods, ctrs)
	tp := connectPlugin(t, dir, readShipped(t), root)
	if err := rs.WaitSync(20 * time.Second); err != nil { // the plugin counts itself connected before its reply arrives
		t.Fatal(err)
	}
	// The processes are fixed after the reply; "synchronized" says when.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(tp.logs.String(), "msg=synchronized"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no synchronized line:\n%s", tp.logs.String())
		}
	}
	updates := rs.LastSync()
	if len(updates) != 2 {
		t.Fatalf("want memory.oom.group updates for the 2 guarded containers, got %v", updates)
	}
	for _, u := range updates {
		if u.GetLinux().GetResources().GetUnified()["memory.oom.group"] != "0" || !u.GetIgnoreFailure() {
			t.Fatalf("update %v", u)
		}
	}
	for pid := 1001; pid <= 1009; pid++ {
		b, _ := os.ReadFile(filepath.Join(root, "proc", fmt.Sprint(pid), "oom_score_adj"))
		want := "900\n"
		if pid > 1006 {
			want = "-997\n"
		}
		if string(b) != want {
			t.Errorf("pid %d: oom_score_adj %q, want %q", pid, b, want)
		}
	}
	if n := len(tp.p.guarded); n != 2 {
		t.Fatalf("%d guarded containers", n)
	}
	if v := gathered(t, tp.p.m, "oomguard_guarded_containers"); v != 2 {
		t.Fatalf("oomguard_guarded_containers = %v, want 2", v)
	}
	// The group flag is also written at once, not only through the runtime's update.
	for i, want := range []string{"0\n", "0\n", "1\n"} {
		cg := strings.TrimPrefix(mustResolve(t, ctrs[i].Linux.CgroupsPath), "/")
		if b, _ := os.ReadFile(filepath.Join(root, "sys/fs/cgroup", cg, "memory.oom.group")); string(b) != want {
			t.Errorf("container %d: memory.oom.group %q after Synchronize, want %q", i, b, want)
		}
	}
	// Drift: a daemon-reload turned the group back on, a process lowered nothing
	// but a new one started at -997.
	cg := strings.TrimPrefix(mustResolve(t, ctrs[0].Linux.CgroupsPath), "/")
	os.WriteFile(filepath.Join(root, "sys/fs/cgroup", cg, "memory.oom.group"), []byte("1\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc/1001/oom_score_adj"), []byte("-997\n"), 0o644)
	tp.p.verifyAll()
	if b, _ := os.ReadFile(filepath.Join(root, "sys/fs/cgroup", cg, "memory.oom.group")); string(b) != "0\n" {
		t.Fatalf("group drift not corrected: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "proc/1001/oom_score_adj")); string(b) != "900\n" {
		t.Fatalf("score drift not corrected: %q", b)
	}
	if !strings.Contains(tp.logs.String(), "drift corrected") {
		t.Fatal("drift correction not logged")
	}
	// A cgroup that vanished is dropped after a few misses, without errors.
	os.RemoveAll(filepath.Join(root, "sys/fs/cgroup", cg))
	for range 5 {
		tp.p.verifyAll()
	}
	if n := len(tp.p.guarded); n != 1 {
		t.Fatalf("vanished container still guarded: %d", n)
	}
}

// socketProxy stands between the plugin and the runtime side: cutting it
// closes every connection, as the death of a runtime process does (the
// in-process adaptation's Stop leaves external plugins connected).
type socketProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newSocketProxy(t *testing.T, listen, target string) *socketProxy {
	ln, err := net.Listen("unix", listen)
	if err != nil {
		t.Fatal(err)
	}
	p := &socketProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *socketProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestReconnectsWhenRuntimeRestarts(t *testing.T) {
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	proxy := newSocketProxy(t, filepath.Join(dir, "proxy.sock"), filepath.Join(dir, "nri.sock"))
	tp := connectPluginAt(t, filepath.Join(dir, "proxy.sock"), readShipped(t), t.TempDir())
	rs.Stop()
	proxy.cut()
	tp.waitConnected(t, false)
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	tp.waitConnected(t, true)
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	rsp, err := rs.Create(pod, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	if err != nil {
		t.Fatal(err)
	}
	if score, _ := adjusted(rsp); score != "900" {
		t.Fatalf("after reconnecting: score %s", score)
	}
}

func TestManyContainersConcurrently(t *testing.T) {
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	connectPlugin(t, dir, readShipped(t), t.TempDir())
	const n = 400
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := nriruntime.KubeletPod(fmt.Sprint(i), "ml", "guaranteed", "runc", nil)
			args := "/sbin/init"
			if i%2 == 1 {
				args = "/app"
			}
			rsp, err := rs.Create(pod, nriruntime.KubeletContainer(pod, "main", -997, args))
			if err != nil {
				errs <- err
				return
			}
			score, _ := adjusted(rsp)
			if want := map[bool]string{true: "900", false: "untouched"}[i%2 == 0]; score != want {
				errs <- fmt.Errorf("container %d: score %s, want %s", i, score, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// strict = true means fail closed even when the configuration itself cannot
// be used: containers fail to be created until a usable one comes. The
// plugin stays connected, so that it can fail them.
func TestStrictConfigurationFromRuntime(t *testing.T) {
	p := New(config.Default(), nil, t.TempDir(), slog.New(slog.DiscardHandler), NewMetrics())
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	create := func() error { _, _, err := p.CreateContainer(context.Background(), pod, ctr); return err }
	if _, err := p.Configure(context.Background(), "strict = tru", "containerd", "2.1"); err != nil || create() != nil {
		t.Fatalf("an invalid runtime configuration must not fail a non-strict plugin: %v %v", err, create())
	}
	if _, err := p.Configure(context.Background(), "strict = true\n[[rule]]\nname='x'\noom_score_adj=1", "containerd", "2.1"); err != nil || !p.cfg.Load().Strict || create() != nil {
		t.Fatalf("valid configuration not taken: %v", err)
	}
	if _, err := p.Configure(context.Background(), "[[rule]]\nname='x'\noom_score_adj=5000", "containerd", "2.1"); err != nil {
		t.Fatalf("Configure must keep the connection: %v", err)
	}
	if err := create(); err == nil || !strings.Contains(err.Error(), "oom_score_adj 5000") {
		t.Fatalf("strict: with an unusable configuration creation must fail, naming why: %v", err)
	}
	if _, err := p.Configure(context.Background(), "[[rule]]\nname='x'\noom_score_adj=1", "containerd", "2.1"); err != nil || create() != nil {
		t.Fatalf("a usable configuration must end the failing: %v %v", err, create())
	}
	// A broken file that says strict = true, at start or from the runtime.
	broken := &config.LoadError{Op: "parse", Path: "/etc/oomguard/config.toml", Strict: true, Err: errors.New("log.level \"loud\"")}
	p = New(config.Default(), broken, t.TempDir(), slog.New(slog.DiscardHandler), NewMetrics())
	if err := create(); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Fatalf("strict file that does not validate: creation must fail: %v", err)
	}
	p = New(config.Default(), nil, t.TempDir(), slog.New(slog.DiscardHandler), NewMetrics())
	p.Configure(context.Background(), "strict = true\n[log]\nlevel = 'loud'", "containerd", "2.1")
	if err := create(); err == nil {
		t.Fatal("strict runtime configuration that does not validate: creation must fail")
	}
}

// Through the real adaptation: a strict, unusable configuration fails the
// container's creation at the runtime.
func TestStrictUnusableFailsCreation(t *testing.T) {
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	tp := connectPlugin(t, dir, readShipped(t), v2Node(t))
	tp.p.Configure(context.Background(), "strict = true\nverify_interval = 'x'", "containerd", "2.1")
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	if _, err := rs.Create(pod, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")); err == nil {
		t.Fatal("the runtime created the container")
	}
}

// On a node whose memory controller is on cgroup v1 (or hybrid) the plugin
// never sends memory.oom.group: runc refuses unified resources there, and
// the container would fail to start.
func TestCgroupV1NodeGetsNoGroup(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sys/fs/cgroup/memory"), 0o755)
	os.MkdirAll(filepath.Join(root, "sys/fs/cgroup/unified"), 0o755)
	os.WriteFile(filepath.Join(root, "sys/fs/cgroup/unified/cgroup.controllers"), nil, 0o644)
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	running := nriruntime.KubeletContainer(pod, "running", -997, "/sbin/init")
	dir := nriDir(t)
	rs := startRuntime(t, dir, []*api.PodSandbox{pod}, []*api.Container{running})
	tp := connectPlugin(t, dir, readShipped(t), root)
	if err := rs.WaitSync(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if u := rs.LastSync(); len(u) != 0 {
		t.Fatalf("Synchronize asked for updates on cgroup v1: %v", u)
	}
	rsp, err := rs.Create(pod, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	if err != nil {
		t.Fatal(err)
	}
	if score, group := adjusted(rsp); score != "900" || group != "untouched" {
		t.Fatalf("adjusted score %s group %s, want 900 and no group", score, group)
	}
	if !strings.Contains(tp.logs.String(), `oom_group="unsupported on cgroup v1 (hybrid)"`) {
		t.Fatalf("the group must be reported unsupported:\n%s", tp.logs.String())
	}
	urs, err := rs.Update(pod, running, &api.LinuxResources{Memory: &api.LinuxMemory{Limit: &api.OptionalInt64{Value: 1 << 30}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range urs.GetUpdate() {
		if _, ok := u.GetLinux().GetResources().GetUnified()["memory.oom.group"]; ok {
			t.Fatalf("update carries memory.oom.group on cgroup v1: %v", u)
		}
	}
}

// A container whose cgroup is not one container's own — the root, kubepods,
// a pod's cgroup, an escape with "..", pid 1 with no path — is refused: no
// process outside a container gets a score, no cgroup above one a group flag.
func TestContainment(t *testing.T) {
	root := v2Node(t)
	write := func(p, c string) {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	// The host: init and sshd, a pod with one container of its own.
	write("proc/1/cgroup", "0::/init.scope\n")
	write("proc/1/oom_score_adj", "0\n")
	write("proc/400/cgroup", "0::/system.slice/sshd.service\n")
	write("proc/400/oom_score_adj", "-1000\n")
	write("proc/500/cgroup", "0::/kubepods.slice/kubepods-podx.slice/cri-containerd-other.scope\n")
	write("proc/500/oom_score_adj", "-997\n")
	for _, cg := range []string{"", "/init.scope", "/system.slice", "/system.slice/sshd.service", "/kubepods.slice", "/kubepods.slice/kubepods-podx.slice", "/kubepods.slice/kubepods-podx.slice/cri-containerd-other.scope"} {
		write("sys/fs/cgroup"+cg+"/memory.oom.group", "1\n")
	}
	write("sys/fs/cgroup/cgroup.procs", "1\n")
	write("sys/fs/cgroup/init.scope/cgroup.procs", "1\n")
	write("sys/fs/cgroup/system.slice/sshd.service/cgroup.procs", "400\n")
	write("sys/fs/cgroup/kubepods.slice/kubepods-podx.slice/cri-containerd-other.scope/cgroup.procs", "500\n")

	pod := nriruntime.KubeletPod("x", "ml", "guaranteed", "runc", nil)
	var ctrs []*api.Container
	for i, path := range []string{"/", "..", "../../..", "kubepods.slice", "/kubepods.slice/kubepods-podx.slice", "system.slice:sshd:service", ""} {
		c := nriruntime.KubeletContainer(pod, fmt.Sprintf("c%d", i), -997, "/sbin/init")
		c.Linux.CgroupsPath = path
		if path == "" {
			c.Pid = 1
		}
		ctrs = append(ctrs, c)
	}
	dir := nriDir(t)
	startRuntime(t, dir, []*api.PodSandbox{pod}, ctrs)
	tp := connectPlugin(t, dir, readShipped(t), root)
	for _, c := range ctrs {
		tp.p.PostStartContainer(context.Background(), pod, c)
	}
	tp.p.verifyAll()
	for pid, want := range map[int]string{1: "0\n", 400: "-1000\n", 500: "-997\n"} {
		if b, _ := os.ReadFile(filepath.Join(root, "proc", fmt.Sprint(pid), "oom_score_adj")); string(b) != want {
			t.Errorf("pid %d outside the containers got oom_score_adj %q", pid, b)
		}
	}
	for _, cg := range []string{"", "/init.scope", "/system.slice/sshd.service", "/kubepods.slice", "/kubepods.slice/kubepods-podx.slice", "/kubepods.slice/kubepods-podx.slice/cri-containerd-other.scope"} {
		if b, _ := os.ReadFile(filepath.Join(root, "sys/fs/cgroup", cg, "memory.oom.group")); string(b) != "1\n" {
			t.Errorf("cgroup %q outside the containers got memory.oom.group %q", cg, b)
		}
	}
	if n := counted(t, tp.p.m, "oomguard_refused_writes_total"); n < float64(len(ctrs)) {
		t.Errorf("%v refusals counted, want one for each of %d containers at least", n, len(ctrs))
	}
	if !strings.Contains(tp.logs.String(), "refusing to write outside a container") {
		t.Error("refusals not logged")
	}
}

// PostStartContainer and the verifier work on the same guards at once: the
// race detector (make test runs this package under -race) must find nothing.
func TestVerifierAndStartRace(t *testing.T) {
	var ctrs []*api.Container
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	for i := range 8 {
		ctrs = append(ctrs, nriruntime.KubeletContainer(pod, fmt.Sprintf("c%d", i), -997, "/sbin/init"))
	}
	root := fixtureNode(t, ctrs, 2)
	dir := nriDir(t)
	startRuntime(t, dir, []*api.PodSandbox{pod}, ctrs)
	tp := connectPlugin(t, dir, readShipped(t), root)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 20 {
				tp.p.verifyAll()
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 20 {
				c := nriruntime.KubeletContainer(pod, fmt.Sprintf("c%d", i%len(ctrs)), -997, "/sbin/init")
				c.Pid = uint32(1001 + i%16)
				tp.p.PostStartContainer(context.Background(), pod, c)
			}
		}()
	}
	wg.Wait()
}

// counted sums a counter vector's values in the plugin's registry.
func counted(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, x := range mf.GetMetric() {
				sum += x.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func mustResolve(t *testing.T, p string) string {
	t.Helper()
	cg, err := kernel.ResolveCgroupsPath(p)
	if err != nil {
		t.Fatal(err)
	}
	return cg
}

// gathered reads one unlabelled metric from the plugin's registry.
func gathered(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
