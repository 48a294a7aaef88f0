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
// exec, a thirtieth of the verifier's interval: none is left at the spec's
// score. Then the same while another guarded container execs 20,000
// short-lived processes: its flood pushes none of this one's out.
func TestE2EForksFollowedWhateverTheExecdProcessDoes(t *testing.T) {
	if err := runcbundle.Available(); err != nil {
		t.Fatal(err)
	}
	forker, err := testbin.Build(t.TempDir(), "forker", "./test/forker", "CGO_ENABLED=0")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"/bin/forker": forker}
	node := startExecNode(t)
	ec := node.run(t, "oomguard-execfork", files)
	const trials, children = 20, 3
	var wrong []string
	made := 0
	for _, how := range []string{"clone-parent", "daemonize"} {
		for trial := range trials {
			w, n := forkTrial(t, ec, how, children)
			for _, p := range w {
				wrong = append(wrong, fmt.Sprintf("%s trial %d: %s", how, trial, p))
			}
			made += n
		}
	}
	t.Logf("%d of %d processes forked without exec at the spec's score after 2 s", len(wrong), made)

	flood := node.run(t, "oomguard-execflood", files)
	const execs = 20000
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do /bin/forker 2>/dev/null; i=$((i+1)); done; echo $i > /flood-done", execs)
	floodPid := filepath.Join(t.TempDir(), "pid")
	if err := exec.CommandContext(flood.ctx, "runc", "--root", flood.runcRoot, "exec", "-d", "--pid-file", floodPid, flood.id, "/bin/sh", "-c", script).Run(); err != nil {
		t.Fatalf("runc exec the flood: %v", err)
	}
	// This process is its subreaper: the container cannot end while it is unreaped.
	defer func() {
		var pid int
		b, _ := os.ReadFile(floodPid)
		if _, err := fmt.Sscan(string(b), &pid); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
	}()
	doneFile := filepath.Join(flood.b.Rootfs(), "flood-done")
	floodMade, during := 0, 0
	for trial := 0; ; trial++ {
		_, err := os.Stat(doneFile)
		if err == nil && trial >= 4 {
			break
		}
		how := []string{"clone-parent", "daemonize"}[trial%2]
		w, n := forkTrial(t, ec, how, children)
		for _, p := range w {
			wrong = append(wrong, fmt.Sprintf("during the flood, %s trial %d: %s", how, trial, p))
		}
		if floodMade += n; err != nil {
			during = trial + 1
		}
		if trial > 200 {
			t.Fatal("the flood of execs did not end")
		}
	}
	t.Logf("during a flood of %d execs in another container: %d trials, %d processes forked", execs, during, floodMade)
	if len(wrong) > 0 {
		t.Fatalf("%d processes forked without exec not at the rule's score after 2 s:\n%s\nplugin:\n%s", len(wrong), strings.Join(wrong, "\n"), node.log.String())
	}
}

// forkTrial execs forker into ec to fork n children the given way, and
// reports those not at the rule's score 2 s later, and how many it made;
// then it kills and reaps them.
func forkTrial(t *testing.T, ec *execContainer, how string, n int) (wrong []string, made int) {
	t.Helper()
	mode := kernel.DetectMode("/")
	pidFile := filepath.Join(t.TempDir(), "pid")
	if err := exec.CommandContext(ec.ctx, "runc", "--root", ec.runcRoot, "exec", "-d", "--pid-file", pidFile, ec.id, "/bin/forker", how, strconv.Itoa(n)).Run(); err != nil {
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
	want := n
	if how == "daemonize" {
		want++ // the daemon itself
	}
	if len(mine) != want {
		t.Fatalf("%s: %d of forker's processes in the container, want %d", how, len(mine), want)
	}
	for _, p := range mine {
		if adj, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", p)); strings.TrimSpace(string(adj)) != "900" {
			wrong = append(wrong, fmt.Sprintf("pid %d at %s", p, strings.TrimSpace(string(adj))))
		}
		syscall.Kill(p, syscall.SIGKILL)
	}
	// This process is the exec'd one's subreaper, and the parent of its
	// CLONE_PARENT children: the container cannot end while one of them is
	// unreaped.
	for _, p := range append(mine, execd) {
		var ws syscall.WaitStatus
		syscall.Wait4(p, &ws, 0, nil)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left, _ := kernel.CgroupPids("/", mode, ec.b.Spec.Linux.CgroupsPath); !slices.ContainsFunc(left, func(p int) bool { return slices.Contains(mine, p) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: forker's processes outlived SIGKILL", how)
		}
	}
	return wrong, len(mine)
}

// execNode is NRI's runtime side with the plugin connected on the shipped
// rules, logging at debug.
type execNode struct {
	rt  *nriruntime.Runtime
	log *syncbuf.Buffer
}

// execContainer is a guarded container (the shipped init-as-pid1 rule,
// Burstable) that runc runs under an execNode.
type execContainer struct {
	ctx          context.Context
	b            *runcbundle.Bundle
	runcRoot, id string
	log          *syncbuf.Buffer
}

func startExecContainer(t *testing.T, files map[string]string) *execContainer {
	t.Helper()
	return startExecNode(t).run(t, "oomguard-execfork", files)
}

func startExecNode(t *testing.T) *execNode {
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
	return &execNode{rt: rt, log: &log}
}

// run starts a container named id (its pod ml/id) with files copied in,
// and waits for the plugin to have set it.
func (n *execNode) run(t *testing.T, id string, files map[string]string) *execContainer {
	t.Helper()
	b, err := runcbundle.New(filepath.Join(t.TempDir(), id), "/sbin/init")
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
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	runcRoot := filepath.Join(b.Dir, "runc-state")
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := n.rt.RunBundle(ctx, runcRoot, b.Dir, id, "ml", null, null)
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
	started := regexp.MustCompile(`pod=ml/` + regexp.QuoteMeta(id) + ` .*phase=start`)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		out, _ := exec.CommandContext(ctx, "runc", "--root", runcRoot, "state", id).CombinedOutput()
		if strings.Contains(string(out), `"running"`) && started.MatchString(n.log.String()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not start\nplugin:\n%s", n.log.String())
		}
	}
	return &execContainer{ctx: ctx, b: b, runcRoot: runcRoot, id: id, log: n.log}
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
