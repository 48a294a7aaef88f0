//go:build e2e

package nriplugin

import (
	"bytes"
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
func TestE2EContainerdOnThisHost(t *testing.T) {
	if err := runcbundle.Available(); err != nil {
		t.Fatal(err)
	}
	if kernel.DetectMode("/") == kernel.ModeV2 {
		t.Skip("this host is cgroup v2; the VM tier covers v2")
	}
	repo, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
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

	env := append(os.Environ(), "PATH="+comp+":"+os.Getenv("PATH"), "CONTAINERD_ADDRESS="+dir+"/c.sock", "KUBELETISH_STATE="+dir)
	var ctrdLog bytes.Buffer
	var pluginLog syncbuf.Buffer
	ctrd := exec.Command(filepath.Join(comp, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	ctrd.Env, ctrd.Stdout, ctrd.Stderr = env, &ctrdLog, &ctrdLog
	ctrd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ctrd.Start(); err != nil {
		t.Fatal(err)
	}
	kubeletish := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(comp, "kubeletish"), args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubeletish %v: %v\n%s\ncontainerd:\n%s\nplugin:\n%s", args, err, out, tail(ctrdLog.String()), pluginLog.String())
		}
		return string(out)
	}
	// Through this containerd (env), or its shims and their mounts outlive the test.
	remove := func(name string) {
		cmd := exec.Command(filepath.Join(comp, "kubeletish"), "remove", name)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("kubeletish remove %s: %v\n%s", name, err, out)
		}
	}
	t.Cleanup(func() {
		remove("vm")
		syscall.Kill(-ctrd.Process.Pid, syscall.SIGKILL)
		ctrd.Wait()
	})
	kubeletish("wait-ready")

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

	kubeletish("import", filepath.Join(dir, "pause.tar"), filepath.Join(dir, "work.tar"))
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
