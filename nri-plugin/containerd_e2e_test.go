//go:build e2e

package nriplugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/testbin"
)

// hostContainerdConfig is containerd's configuration on this host, every
// path below the directory it is given.
func hostContainerdConfig(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/containerd-host.toml")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, string(b), dir)
}

// On this build host the memory controller is on cgroup v1 (hybrid), as on
// most EKS AL2 nodes. containerd 2.4.2, built as the VM tier builds it, runs
// here with the plugin connected: a container the shipped rule matches is
// created and started with its score, and the group flag, which runc refuses
// on cgroup v1, is reported unsupported instead of failing the container.
// hostContainerd is containerd 2.4.2 on this host, with kubeletish to
// drive its CRI as kubelet does and the workload images imported.
type hostContainerd struct {
	dir, comp string
	env       []string
	log       *syncbuf.Buffer
}

func startHostContainerd(t *testing.T) *hostContainerd {
	t.Helper()
	if err := runcbundle.Available(); err != nil {
		t.Fatal(err)
	}
	if kernel.DetectMode("/") == kernel.ModeV2 {
		t.Skip("this host is cgroup v2; the VM tier covers v2")
	}
	comp := testbin.ComponentFor(t, "containerd-2", "")
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "kubeletish"} {
		testbin.ComponentFor(t, "containerd-2", b)
	}
	dir, err := os.MkdirTemp("", "ogc-") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), hostContainerdConfig(t, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	pause, err := runcbundle.BusyboxImage(nil, []string{"/bin/sleep", "2147483647"})
	if err != nil {
		t.Fatal(err)
	}
	work, err := runcbundle.BusyboxImage(map[string]runcbundle.ImageFile{
		"/sbin/init": {Data: []byte("#!/bin/sh\nexec sleep 2147483647\n"), Mode: 0o755},
	}, []string{"/bin/sh"})
	if err != nil {
		t.Fatal(err)
	}
	if err := runcbundle.WriteOCIArchive(filepath.Join(dir, "pause.tar"), "registry.k8s.io/pause:3.10", pause); err != nil {
		t.Fatal(err)
	}
	if err := runcbundle.WriteOCIArchive(filepath.Join(dir, "work.tar"), "registry.example/oomguard/workload:1", work); err != nil {
		t.Fatal(err)
	}
	h := &hostContainerd{dir: dir, comp: comp, log: &syncbuf.Buffer{},
		env: append(os.Environ(), "PATH="+comp+":"+os.Getenv("PATH"), "CONTAINERD_ADDRESS="+dir+"/c.sock", "KUBELETISH_STATE="+dir)}
	ctrd := exec.Command(filepath.Join(comp, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	ctrd.Env, ctrd.Stdout, ctrd.Stderr = h.env, h.log, h.log
	ctrd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ctrd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-ctrd.Process.Pid, syscall.SIGKILL)
		ctrd.Wait()
	})
	h.kubeletish(t, nil, "wait-ready")
	h.kubeletish(t, nil, "import", filepath.Join(dir, "pause.tar"), filepath.Join(dir, "work.tar"))
	return h
}

// kubeletish runs it against this containerd, failing the test (with the
// logs) when it fails.
func (h *hostContainerd) kubeletish(t *testing.T, pluginLog *syncbuf.Buffer, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.comp, "kubeletish"), args...)
	cmd.Env = h.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		plog := ""
		if pluginLog != nil {
			plog = pluginLog.String()
		}
		t.Fatalf("kubeletish %v: %v\n%s\ncontainerd:\n%s\nplugin:\n%s", args, err, out, tail(h.log.String()), plog)
	}
	return string(out)
}

// remove removes a pod through this containerd: its shims and their
// mounts outlive the test otherwise.
func (h *hostContainerd) remove(name string) {
	cmd := exec.Command(filepath.Join(h.comp, "kubeletish"), "remove", name)
	cmd.Env = h.env
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "kubeletish remove %s: %v\n%s", name, err, out)
	}
}

func TestE2EContainerdOnThisHost(t *testing.T) {
	h := startHostContainerd(t)
	dir := h.dir
	var pluginLog syncbuf.Buffer
	kubeletish := func(args ...string) string { t.Helper(); return h.kubeletish(t, &pluginLog, args...) }
	remove := h.remove
	t.Cleanup(func() { remove("vm") })
	repo, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}

	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	// containerd 2.x serves NRI by default: the DaemonSet's install finds it
	// serving, its configuration (as the node sees it, dir its root) keeping
	// it so, and changes nothing, asking for no restart.
	os.MkdirAll(filepath.Join(dir, "etc/containerd"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc/containerd/config.toml"), hostContainerdConfig(t, ""), 0o644)
	if out, err := exec.Command(bin, "install", "--nri-only", "--root", dir, "--socket", "/nri.sock").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "unchanged: NRI is on in the running runtime at /nri.sock") {
		t.Fatalf("install --nri-only on a containerd that serves NRI: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/containerd/conf.d")); err == nil {
		t.Fatal("install wrote a drop-in for a containerd that serves NRI")
	}
	plugin := exec.Command(bin, "--config", filepath.Join(repo, "deploy", "config.toml"), "--socket", dir+"/nri.sock")
	plugin.Stdout, plugin.Stderr = &pluginLog, &pluginLog
	if err := plugin.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plugin.Process.Kill(); plugin.Wait() })
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(pluginLog.String(), "msg=synchronized"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin never synchronized:\n%s", pluginLog.String())
		}
	}

	// Burstable (500): root here lacks CAP_SYS_RESOURCE, which runc needs for -997.
	kubeletish("run", "vm", "--qos", "burstable", "--", "/sbin/init")
	got := kubeletish("inspect", "vm")
	if !strings.Contains(got, "state=CONTAINER_RUNNING") || !strings.Contains(got, "oom_score_adj=900") {
		t.Fatalf("inspect: %s\nplugin:\n%s", got, pluginLog.String())
	}
	// The decision is logged just after the plugin's reply.
	if !logsWithin(&pluginLog, "rule=init-as-pid1 phase=start oom_score_adj=500→900 oom_group=\"unsupported on cgroup v1", 5*time.Second) {
		t.Fatalf("the decision must report the group unsupported:\n%s", pluginLog.String())
	}

	// The runtime handler is the pod's (RuntimeClass), which NRI passes with
	// the pod: the shipped sysbox rule matches a container that is no init.
	kubeletish("run", "handler", "--qos", "burstable", "--handler", "sysbox-runc", "--", "/bin/sleep", "2147483647")
	t.Cleanup(func() { remove("handler") })
	if got := kubeletish("inspect", "handler"); !strings.Contains(got, "oom_score_adj=900") {
		t.Fatalf("a container on the sysbox-runc handler: %s\nplugin:\n%s", got, pluginLog.String())
	}
	if !logsWithin(&pluginLog, "rule=sysbox", 5*time.Second) {
		t.Fatalf("the sysbox rule did not decide:\n%s", pluginLog.String())
	}
}

// logsWithin reports whether log holds s within d.
func logsWithin(log *syncbuf.Buffer, s string, d time.Duration) bool {
	for deadline := time.Now().Add(d); !strings.Contains(log.String(), s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
