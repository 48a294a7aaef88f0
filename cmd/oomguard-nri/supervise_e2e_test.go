//go:build e2e

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/testbin"
)

// fixtureContainer puts a container on the node tree at root as kubelet
// and runc leave it: its cgroup at memory.oom.group 1, its one process
// (pid) at the spec's score.
func fixtureContainer(t *testing.T, root string, ctr *api.Container, pid int) {
	t.Helper()
	cg, err := kernel.ResolveCgroupsPath(ctr.Linux.CgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{
		"sys/fs/cgroup/cgroup.controllers":         "cpu memory pids\n",
		"sys/fs/cgroup" + cg + "/memory.oom.group": "1\n",
		"sys/fs/cgroup" + cg + "/cgroup.procs":     fmt.Sprintf("%d\n", pid),
		fmt.Sprintf("proc/%d/oom_score_adj", pid):  fmt.Sprintf("%d\n", ctr.Linux.OomScoreAdj.Value),
		fmt.Sprintf("proc/%d/cgroup", pid):         "0::" + cg + "\n",
		"proc/sys/kernel/random/boot_id":           "fixture\n",
	} {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// atRule reports whether the container's process and cgroup are at the
// shipped init-as-pid1 rule's 900 and 0.
func atRule(root string, ctr *api.Container, pid int) bool {
	cg, _ := kernel.ResolveCgroupsPath(ctr.Linux.CgroupsPath)
	s, _ := os.ReadFile(filepath.Join(root, fmt.Sprintf("proc/%d/oom_score_adj", pid)))
	g, _ := os.ReadFile(filepath.Join(root, "sys/fs/cgroup"+cg+"/memory.oom.group"))
	return strings.TrimSpace(string(s)) == "900" && strings.TrimSpace(string(g)) == "0"
}

// worker is the supervisor's child, its plugin.
func worker(t *testing.T, supervisor int) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		procs, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, f := range procs {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			s := string(b)
			fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state, ppid, …
			if len(fields) > 1 && fields[1] == strconv.Itoa(supervisor) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
				return pid
			}
		}
	}
	t.Fatal("the supervisor has no worker")
	return 0
}

// The crash window, with the built binary: the plugin (--supervise) killed
// -9, as the OOM killer kills it; a container the runtime creates while it
// is away is at its rule once the supervisor started the plugin again and
// the runtime synchronized it: within a second, where kubelet's restart
// of a crashing container waits 10 s, then 20 s … 5 min. Killed again at
// once, it is back as fast (the backoff's first steps are 0 and 100 ms).
// Its /healthz answers on its socket (oomguard-nri health) before and after.
func TestE2ESupervisedCrashWindow(t *testing.T) {
	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir, err := os.MkdirTemp("", "oomguard-sup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg, err := testbin.ShippedConfig("stderr")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.toml")
	os.WriteFile(cfgPath, cfg, 0o644)
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	first := nriruntime.KubeletContainer(pod, "first", -997, "/sbin/init")
	fixtureContainer(t, root, first, 2001)
	rt, err := nriruntime.Start(dir, []*api.PodSandbox{pod}, []*api.Container{first})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	logs := &syncbuf.Buffer{}
	rt.PluginLog = logs
	health := filepath.Join(dir, "health.sock")
	cmd, err := rt.StartPlugin(bin, "--supervise", "--root", root, "--config", cfgPath, "--health-socket", health)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	waitRule := func(ctr *api.Container, pid int, within time.Duration) time.Duration {
		start := time.Now()
		for !atRule(root, ctr, pid) {
			if time.Since(start) > within {
				t.Fatalf("container %s not at its rule within %s; the plugin's log:\n%s", ctr.Name, within, logs)
			}
			time.Sleep(2 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitRule(first, 2001, 10*time.Second)
	if out, err := exec.Command(bin, "health", "--socket", health).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("oomguard-nri health: %v %q", err, out)
	}
	for i, name := range []string{"second", "third"} {
		w := worker(t, cmd.Process.Pid)
		syscall.Kill(w, syscall.SIGKILL)
		killed := time.Now()
		ctr := nriruntime.KubeletContainer(pod, name, -997, "/sbin/init")
		fixtureContainer(t, root, ctr, 2002+i)
		rt.Add(pod, ctr)
		waitRule(ctr, 2002+i, 10*time.Second)
		window := time.Since(killed)
		t.Logf("kill -9 #%d of the plugin to the container created meanwhile at its rule: %s", i+1, window.Round(time.Millisecond))
		if window > 3*time.Second {
			t.Errorf("the crash window %s is not bounded by the supervisor's backoff", window)
		}
	}
	if !strings.Contains(logs.String(), `msg="the worker died; starting it again"`) || !strings.Contains(logs.String(), "killed by SIGKILL") {
		t.Fatalf("the supervisor did not say the worker died:\n%s", logs)
	}
	if out, err := exec.Command(bin, "health", "--socket", health).CombinedOutput(); err != nil {
		t.Fatalf("oomguard-nri health after the restarts: %v %q", err, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the supervisor ended with %v after SIGTERM, want 0 (its worker's)\n%s", err, logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor did not stop after SIGTERM")
	}
}
