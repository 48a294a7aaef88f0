//go:build e2e

package nriplugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/testbin"
)

// A process exec'd into a guarded container (runc exec, as kubectl exec and
// exec probes reach it) that forks at once: every process, the exec'd one
// and each it forked before the plugin set it, is at the rule's score well
// before the verifier's minute, on the real kernel's process events; the
// gap from each exec or fork to its score is logged (p50, p99, max).
func TestE2EExecForkGap(t *testing.T) {
	if err := runcbundle.Available(); err != nil {
		t.Fatal(err)
	}
	ec := startExecContainer(t, nil)
	ctx, b, runcRoot, id, log := ec.ctx, ec.b, ec.runcRoot, ec.id, ec.log
	cg := kernel.MemoryCgroupDir("/", kernel.DetectMode("/"), b.Spec.Linux.CgroupsPath)
	const rounds, children = 10, 30
	// Subshells fork and never exec: only their forks can tell the plugin.
	script := fmt.Sprintf("mkfifo /tmp/f 2>/dev/null; i=0; while [ $i -lt %d ]; do ( read x < /tmp/f ) & i=$((i+1)); done; wait", children)
	var wrong []string
	for r := range rounds {
		// Detached, with no output: the sleeps would hold a pipe open.
		pidFile := filepath.Join(t.TempDir(), "pid")
		if err := exec.CommandContext(ctx, "runc", "--root", runcRoot, "exec", "-d", "--pid-file", pidFile, id, "/bin/sh", "-c", script).Run(); err != nil {
			t.Fatalf("runc exec: %v", err)
		}
		time.Sleep(2 * time.Second) // the events' delay, a thirtieth of the verifier's interval
		pids, err := kernel.CgroupPids("/", kernel.DetectMode("/"), b.Spec.Linux.CgroupsPath)
		if err != nil {
			t.Fatalf("the container's processes (%s): %v", cg, err)
		}
		var pid int
		b, _ := os.ReadFile(pidFile)
		fmt.Sscan(string(b), &pid)
		n := 0
		var forked []int
		for _, p := range pids {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
			if strings.TrimSpace(string(comm)) != "sh" {
				continue
			}
			if n++; p != pid {
				forked = append(forked, p)
			}
			adj, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", p))
			if s := strings.TrimSpace(string(adj)); s != "900" {
				wrong = append(wrong, fmt.Sprintf("round %d: pid %d at %s", r, p, s))
			}
		}
		if n < children+1 {
			t.Fatalf("round %d: %d exec'd processes found, want %d", r, n, children+1)
		}
		// The subshells, then the exec'd shell, which is this process's
		// child (a subreaper): the container's init cannot end while a
		// process of its namespace is unreaped.
		for _, p := range forked {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if pid > 0 {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
	}
	gaps := setDelays(log.String())
	if len(gaps) > 0 {
		slices.Sort(gaps)
		t.Logf("exec or fork to the rule's score, %d processes set: p50 %s, p99 %s, max %s", len(gaps),
			gaps[len(gaps)/2], gaps[len(gaps)*99/100], gaps[len(gaps)-1])
	}
	if len(wrong) > 0 {
		t.Fatalf("%d of %d exec'd processes and their children not at the rule's score after 2 s:\n%s\nplugin:\n%s",
			len(wrong), rounds*(children+1), strings.Join(wrong, "\n"), log.String())
	}
}

// Forks are followed whatever the exec'd process does, on the real
// kernel's process events (the process connector on this cgroup v1 host;
// eBPF on v2): children it clones with CLONE_PARENT (their fork events
// name its parent, the runtime's), and a daemon's, forked after the
// exec'd process exited at once. None of them execs: only forks can tell
// the plugin. 20 trials of each, 3 children each, looked at 2 s after the
// exec, a thirtieth of the verifier's interval. On an idle host none is
// left at the spec's score; on a loaded one (CI's e2e packages side by
// side) one trial in 20 to 40 still is, the exec'd process gone before its
// event was read: the figures are logged, not asserted, until that gap is
// closed (issue 41), so that it cannot fail every change for a known gap.
func TestE2EForksFollowedWhateverTheExecdProcessDoes(t *testing.T) {
	if err := runcbundle.Available(); err != nil {
		t.Fatal(err)
	}
	forker, err := testbin.Build(t.TempDir(), "forker", "./test/forker", "CGO_ENABLED=0")
	if err != nil {
		t.Fatal(err)
	}
	ec := startExecContainer(t, map[string]string{"/bin/forker": forker})
	mode := kernel.DetectMode("/")
	const trials, children = 20, 3
	for _, how := range []string{"clone-parent", "daemonize"} {
		var wrong []string
		made := 0
		for trial := range trials {
			pidFile := filepath.Join(t.TempDir(), "pid")
			if err := exec.CommandContext(ec.ctx, "runc", "--root", ec.runcRoot, "exec", "-d", "--pid-file", pidFile, ec.id, "/bin/forker", how, strconv.Itoa(children)).Run(); err != nil {
				t.Fatalf("runc exec forker %s: %v", how, err)
			}
			var execd int
			b, _ := os.ReadFile(pidFile)
			fmt.Sscan(string(b), &execd)
			time.Sleep(2 * time.Second)
			pids, err := kernel.CgroupPids("/", mode, ec.b.Spec.Linux.CgroupsPath)
			if err != nil {
				t.Fatal(err)
			}
			var mine []int
			for _, p := range pids {
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(comm)) == "forker" {
					mine = append(mine, p)
				}
			}
			want := children
			if how == "daemonize" {
				want++ // the daemon itself
			}
			if len(mine) != want {
				t.Fatalf("%s trial %d: %d of forker's processes in the container, want %d", how, trial, len(mine), want)
			}
			for _, p := range mine {
				made++
				if adj, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", p)); strings.TrimSpace(string(adj)) != "900" {
					wrong = append(wrong, fmt.Sprintf("trial %d: pid %d at %s", trial, p, strings.TrimSpace(string(adj))))
				}
				syscall.Kill(p, syscall.SIGKILL)
			}
			// This process is the exec'd one's subreaper, and the parent of
			// its CLONE_PARENT children: the container cannot end while one
			// of them is unreaped.
			for _, p := range append(mine, execd) {
				var ws syscall.WaitStatus
				syscall.Wait4(p, &ws, 0, nil)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if left, _ := kernel.CgroupPids("/", mode, ec.b.Spec.Linux.CgroupsPath); !slices.ContainsFunc(left, func(p int) bool { return slices.Contains(mine, p) }) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s trial %d: forker's processes outlived SIGKILL", how, trial)
				}
			}
		}
		t.Logf("%s: %d of %d processes forked without exec at the spec's score after 2 s", how, len(wrong), made)
		if len(wrong) > 0 {
			t.Logf("%s: not at the rule's score after 2 s:\n%s", how, strings.Join(wrong, "\n"))
		}
	}
}

// execContainer is a guarded container (the shipped init-as-pid1 rule,
// Burstable) that runc runs under NRI's runtime side, with the plugin
// connected and logging at debug.
type execContainer struct {
	ctx          context.Context
	b            *runcbundle.Bundle
	runcRoot, id string
	log          *syncbuf.Buffer
}

func startExecContainer(t *testing.T, files map[string]string) *execContainer {
	t.Helper()
	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	text := strings.Replace(readShipped(t), `level = "info"`, `level = "debug"`, 1)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := nriruntime.Start(nriDir(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	var log syncbuf.Buffer
	rt.PluginLog = &log
	plugin, err := rt.StartPlugin(bin, "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plugin.Process.Kill(); plugin.Wait() })

	b, err := runcbundle.New(filepath.Join(t.TempDir(), "execfork"), "/sbin/init")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddFile("/sbin/init", []byte("#!/bin/sh\nexec sleep 100000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, src := range files {
		if err := b.CopyFile(src, path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	score := 500 // kubelet's Burstable: this host lacks CAP_SYS_RESOURCE for -997
	b.Spec.Process.OOMScoreAdj = &score
	b.SetQoS("burstable")
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	runcRoot, id := filepath.Join(b.Dir, "runc-state"), "oomguard-execfork"
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := rt.RunBundle(ctx, runcRoot, b.Dir, id, "ml", null, null)
		done <- err
	}()
	t.Cleanup(func() {
		if out, err := exec.Command("runc", "--root", runcRoot, "kill", id, "KILL").CombinedOutput(); err != nil {
			t.Logf("runc kill: %v: %s", err, out)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the container did not stop")
		}
	})
	runc := func(args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, "runc", append([]string{"--root", runcRoot}, args...)...).CombinedOutput()
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if out, _ := runc("state", id); strings.Contains(string(out), `"running"`) && strings.Contains(log.String(), "phase=start") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not start\nplugin:\n%s", log.String())
		}
	}
	return &execContainer{ctx: ctx, b: b, runcRoot: runcRoot, id: id, log: &log}
}

var afterRE = regexp.MustCompile(`(?:exec|fork)'d process set.* after=(\S+)`)

// setDelays are the plugin's "after" of each process it set on an event.
func setDelays(log string) []time.Duration {
	var out []time.Duration
	for _, m := range afterRE.FindAllStringSubmatch(log, -1) {
		if d, err := time.ParseDuration(m[1]); err == nil {
			out = append(out, d)
		}
	}
	return out
}
