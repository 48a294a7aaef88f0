package nriplugin

import (
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
	"github.com/oomguard/oomguard/test/syncbuf"
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
	logs   *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan struct{}
}

// log is what the plugin logged, once what it logs after its replies is.
func (tp *testPlugin) log() string {
	tp.p.waitBackground()
	return tp.logs.String()
}

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
	tp := &testPlugin{logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(tp.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tp.p = New(Options{Config: cfg, Root: root, Log: log, Metrics: NewMetrics()})
	tp.p.execs = noExecs // the host's execs are not the fixture's
	tp.p.kmsg = noKmsg   // nor its kernel log
	ctx, cancel := context.WithCancel(context.Background())
	tp.cancel = cancel
	go func() { defer close(tp.done); tp.p.Run(ctx) }()
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

// claimed is what the plugin's answer to CreateContainer set: nothing, ever
// (another plugin setting the same field would make NRI refuse the container).
func claimed(rsp *api.CreateContainerResponse) string {
	adj := rsp.GetAdjust()
	if adj.GetLinux().GetOomScoreAdj() != nil || len(adj.GetLinux().GetResources().GetUnified()) > 0 ||
		len(adj.GetAnnotations()) > 0 || len(adj.GetMounts()) > 0 || len(adj.GetEnv()) > 0 || len(adj.GetArgs()) > 0 ||
		len(adj.GetHooks().GetCreateRuntime()) > 0 || len(adj.GetHooks().GetPrestart()) > 0 {
		return adj.String()
	}
	if len(rsp.GetUpdate()) > 0 {
		return fmt.Sprint(rsp.GetUpdate())
	}
	return ""
}

// onNode is what the fixture node shows of a container: the score of its
// first process and its cgroup's memory.oom.group.
func onNode(t *testing.T, root string, ctr *api.Container) (score, group string) {
	t.Helper()
	cg := filepath.Join(root, "sys/fs/cgroup", mustResolve(t, ctr.Linux.CgroupsPath))
	procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _, _ := strings.Cut(string(procs), "\n")
	s, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj"))
	g, _ := os.ReadFile(filepath.Join(cg, "memory.oom.group"))
	return strings.TrimSpace(string(s)), strings.TrimSpace(string(g))
}

// createAndStart takes a container through NRI as a runtime does: created
// (the plugin claims nothing), then started (the plugin sets it up).
func createAndStart(t *testing.T, rs *nriruntime.Runtime, pod *api.PodSandbox, ctr *api.Container) {
	t.Helper()
	rsp, err := rs.Create(pod, ctr)
	if err != nil {
		t.Fatalf("the container must be created: %v", err)
	}
	if c := claimed(rsp); c != "" {
		t.Fatalf("the plugin claimed %s at creation", c)
	}
	if err := rs.StartContainer(pod, ctr); err != nil {
		t.Fatalf("the container must start: %v", err)
	}
}

// v2Node is an empty cgroup v2 node.
func v2Node(t *testing.T) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sys/fs/cgroup"), 0o755)
	os.WriteFile(filepath.Join(root, "sys/fs/cgroup/cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
	return root
}

func TestStartContainerApplies(t *testing.T) {
	type tc struct {
		name         string
		pod          *api.PodSandbox
		ctr          *api.Container
		wantScore    string
		wantGroup    string
		wantRejected string
	}
	var cases []tc
	add := func(name string, pod *api.PodSandbox, score int, args []string, wantScore, wantGroup, rejected string) {
		cases = append(cases, tc{name, pod, nriruntime.KubeletContainer(pod, "main", score, args...), wantScore, wantGroup, rejected})
	}
	add("guaranteed systemd", nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil), -997, []string{"/lib/systemd/systemd"}, "900", "0", "")
	add("besteffort app", nriruntime.KubeletPod("2", "ml", "besteffort", "runc", nil), 1000, []string{"/app"}, "1000", "1", "")
	add("sysbox", nriruntime.KubeletPod("3", "ml", "burstable", "sysbox-runc", nil), 500, []string{"/bin/bash"}, "900", "0", "")
	add("kube-system init", nriruntime.KubeletPod("4", "kube-system", "guaranteed", "runc", nil), -997, []string{"/sbin/init"}, "-997", "1", "")
	add("hostile immunity", nriruntime.KubeletPod("5", "ml", "guaranteed", "runc", map[string]string{"oomguard.io/oom-score-adj": "-1000"}), -997, []string{"/sbin/init"}, "900", "0", "below 900")
	add("hostile garbage", nriruntime.KubeletPod("6", "ml", "guaranteed", "runc", map[string]string{"oomguard.io/oom-score-adj": strings.Repeat("9", 4096)}), -997, []string{"/sbin/init"}, "900", "0", "not an integer")
	add("hostile group", nriruntime.KubeletPod("7", "ml", "guaranteed", "runc", map[string]string{"oomguard.io/oom-group": "yes please"}), -997, []string{"/sbin/init"}, "900", "0", "not a boolean")
	add("annotation raises", nriruntime.KubeletPod("8", "ml", "guaranteed", "runc", map[string]string{"oom-score-adj.oomguard.io/container.main": "990"}), -997, []string{"/sbin/init"}, "990", "0", "")
	var ctrs []*api.Container
	for _, c := range cases {
		ctrs = append(ctrs, c.ctr)
	}
	root := fixtureNode(t, ctrs, 1)
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	tp := connectPlugin(t, dir, readShipped(t), root)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			createAndStart(t, rs, c.pod, c.ctr)
			if score, group := onNode(t, root, c.ctr); score != c.wantScore || group != c.wantGroup {
				t.Fatalf("started with score %s group %s, want %s %s", score, group, c.wantScore, c.wantGroup)
			}
			if c.wantRejected != "" && !strings.Contains(tp.log(), c.wantRejected) {
				t.Fatalf("no rejection %q in the log:\n%s", c.wantRejected, tp.log())
			}
		})
	}
	logs := tp.log()
	for _, want := range []string{
		// One line a container: decided and applied at StartContainer.
		`msg=decision pod=ml/pod-1 container=main rule=init-as-pid1 phase=start oom_score_adj=-997→900 oom_group=1→0 reasons=`,
	} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log line missing: %s\n%s", want, logs)
		}
	}
}

// A resize: the runtime applies kubelet's memory.oom.group = 1 again; the
// plugin, asked nothing at UpdateContainer, sets it back once it is applied.
func TestPostUpdateSetsGroupAgain(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	other := nriruntime.KubeletContainer(pod, "sidecar", -997, "/app")
	root := fixtureNode(t, []*api.Container{ctr, other}, 3)
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	tp := connectPlugin(t, dir, readShipped(t), root)
	createAndStart(t, rs, pod, ctr)
	createAndStart(t, rs, pod, other)
	rsp, err := rs.Update(pod, ctr, &api.LinuxResources{Memory: &api.LinuxMemory{Limit: &api.OptionalInt64{Value: 2 << 30}},
		Unified: map[string]string{"memory.oom.group": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rsp.GetUpdate() {
		if g, ok := u.GetLinux().GetResources().GetUnified()["memory.oom.group"]; ok && g != "1" {
			t.Fatalf("the plugin claimed memory.oom.group at UpdateContainer: %v", u)
		}
	}
	for _, pid := range []string{"1001", "1002", "1003"} { // as kubelet's score came back with the resize
		os.WriteFile(filepath.Join(root, "proc", pid, "oom_score_adj"), []byte("-997\n"), 0o644)
	}
	for _, c := range []*api.Container{ctr, other} {
		os.WriteFile(filepath.Join(root, "sys/fs/cgroup", mustResolve(t, c.Linux.CgroupsPath), "memory.oom.group"), []byte("1\n"), 0o644)
		if err := rs.PostUpdate(pod, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, group := onNode(t, root, ctr); group != "0" {
		t.Fatalf("memory.oom.group %s after the resize, want 0", group)
	}
	// The processes' scores are set after the reply, not under the runtime's lock.
	tp.p.waitBackground()
	for _, pid := range []string{"1001", "1002", "1003"} {
		if s, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj")); string(s) != "900\n" {
			t.Fatalf("process %s has oom_score_adj %q after the resize, want 900", pid, s)
		}
	}
	if _, group := onNode(t, root, other); group != "1" {
		t.Fatalf("an unguarded container's resize was changed: memory.oom.group %s", group)
	}
}

// fixtureNode is a cgroup v2 tree with running containers and their processes.
func fixtureNode(t testing.TB, ctrs []*api.Container, pidsPer int) string {
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
	if updates := rs.LastSync(); len(updates) != 0 {
		t.Fatalf("the plugin asked the runtime for updates at Synchronize (it claims nothing): %v", updates)
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
	if n := tp.p.reg.guarded(); n != 2 {
		t.Fatalf("%d guarded containers", n)
	}
	if v := gathered(t, tp.p.m, "oomguard_guarded_containers"); v != 2 {
		t.Fatalf("oomguard_guarded_containers = %v, want 2", v)
	}
	// The group flag is written at once.
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
	if !strings.Contains(tp.log(), "drift corrected") {
		t.Fatal("drift correction not logged")
	}
	// A cgroup that vanished is dropped after a few misses, without errors.
	os.RemoveAll(filepath.Join(root, "sys/fs/cgroup", cg))
	for range 5 {
		tp.p.verifyAll()
	}
	if n := tp.p.reg.guarded(); n != 1 {
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
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{ctr}, 1)
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	proxy := newSocketProxy(t, filepath.Join(dir, "proxy.sock"), filepath.Join(dir, "nri.sock"))
	tp := connectPluginAt(t, filepath.Join(dir, "proxy.sock"), readShipped(t), root)
	rs.Stop()
	proxy.cut()
	tp.waitConnected(t, false)
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	tp.waitConnected(t, true)
	createAndStart(t, rs, pod, ctr)
	if score, _ := onNode(t, root, ctr); score != "900" {
		t.Fatalf("after reconnecting: score %s", score)
	}
}

func TestManyContainersConcurrently(t *testing.T) {
	const n = 400
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range n {
		pod := nriruntime.KubeletPod(fmt.Sprint(i), "ml", "guaranteed", "runc", nil)
		args := "/sbin/init"
		if i%2 == 1 {
			args = "/app"
		}
		pods = append(pods, pod)
		ctrs = append(ctrs, nriruntime.KubeletContainer(pod, "main", -997, args))
	}
	root := fixtureNode(t, ctrs, 1)
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	connectPlugin(t, dir, readShipped(t), root)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rsp, err := rs.Create(pods[i], ctrs[i])
			if err == nil && claimed(rsp) != "" {
				err = fmt.Errorf("claimed %s", claimed(rsp))
			}
			if err == nil {
				err = rs.StartContainer(pods[i], ctrs[i])
			}
			if err != nil {
				errs <- fmt.Errorf("container %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, c := range ctrs {
		if score, _ := onNode(t, root, c); score != map[bool]string{true: "900", false: "-997"}[i%2 == 0] {
			t.Errorf("container %d: score %s", i, score)
		}
	}
}

// strict = true means fail closed even when the configuration itself cannot
// be used: containers fail to be created until a usable one comes. The
// plugin stays connected, so that it can fail them.
func TestStrictConfigurationFromRuntime(t *testing.T) {
	p := New(Options{Config: config.Default(), Root: t.TempDir(), Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	create := func() error { return p.StartContainer(context.Background(), pod, ctr) }
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
	p = New(Options{Config: config.Default(), ConfigErr: broken, Root: t.TempDir(), Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	if err := create(); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Fatalf("strict file that does not validate: creation must fail: %v", err)
	}
	p = New(Options{Config: config.Default(), Root: t.TempDir(), Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	p.Configure(context.Background(), "strict = true\n[log]\nlevel = 'loud'", "containerd", "2.1")
	if err := create(); err == nil {
		t.Fatal("strict runtime configuration that does not validate: creation must fail")
	}
}

// Through the real adaptation: a strict, unusable configuration fails the
// container at the runtime before its first instruction runs (its start).
func TestStrictUnusableFailsCreation(t *testing.T) {
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	tp := connectPlugin(t, dir, readShipped(t), v2Node(t))
	tp.p.Configure(context.Background(), "strict = true\nverify_interval = 'x'", "containerd", "2.1")
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	if _, err := rs.Create(pod, ctr); err != nil {
		t.Fatalf("the plugin is asked nothing at creation: %v", err)
	}
	if err := rs.StartContainer(pod, ctr); err == nil {
		t.Fatal("the runtime started the container")
	}
}

// On a node whose memory controller is on cgroup v1 (or hybrid) the plugin
// sets the score only: memory.oom.group does not exist there.
func TestCgroupV1NodeGetsNoGroup(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	running := nriruntime.KubeletContainer(pod, "running", -997, "/sbin/init")
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := t.TempDir()
	write := func(p, c string) {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/fs/cgroup/unified/cgroup.controllers", "")
	for i, c := range []*api.Container{running, ctr} {
		cg := mustResolve(t, c.Linux.CgroupsPath)
		pid := fmt.Sprint(2000 + i)
		write("sys/fs/cgroup/memory"+cg+"/cgroup.procs", pid+"\n")
		write("proc/"+pid+"/cgroup", "12:memory:"+cg+"\n0::"+cg+"\n")
		write("proc/"+pid+"/oom_score_adj", "-997\n")
	}
	dir := nriDir(t)
	rs := startRuntime(t, dir, []*api.PodSandbox{pod}, []*api.Container{running})
	tp := connectPlugin(t, dir, readShipped(t), root)
	if err := rs.WaitSync(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if u := rs.LastSync(); len(u) != 0 {
		t.Fatalf("Synchronize asked for updates: %v", u)
	}
	createAndStart(t, rs, pod, ctr)
	if b, _ := os.ReadFile(filepath.Join(root, "proc/2001/oom_score_adj")); string(b) != "900\n" {
		t.Fatalf("score %q on cgroup v1, want 900", b)
	}
	if !strings.Contains(tp.log(), `oom_group="unsupported on cgroup v1 (hybrid)"`) {
		t.Fatalf("the group must be reported unsupported:\n%s", tp.log())
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
		tp.p.StartContainer(context.Background(), pod, c)
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
	if !strings.Contains(tp.log(), "refusing to write outside a container") {
		t.Error("refusals not logged")
	}
}

// StartContainer and the verifier work on the same guards at once: the
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
				tp.p.StartContainer(context.Background(), pod, c)
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

func mustResolve(t testing.TB, p string) string {
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
