//go:build e2e

package hook_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/runcbundle"
)

func runcEnv(t *testing.T) *env {
	t.Helper()
	if err := runcbundle.Available(); err != nil {
		t.Fatalf("e2e needs runc: %v", err)
	}
	return newEnv(t, "")
}

func (e *env) container(t *testing.T, name string, args ...string) *runcbundle.Bundle {
	t.Helper()
	b, err := runcbundle.New(filepath.Join(e.dir, name), args...)
	if err != nil {
		t.Fatal(err)
	}
	b.AddHook(hookBin, "--config", e.cfg)
	return b
}

func runContainer(t *testing.T, b *runcbundle.Bundle, id string) runcbundle.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := b.Run(ctx, id)
	if err != nil {
		t.Fatalf("runc run %s: %v (stderr %s)", id, err, res.Stderr)
	}
	return res
}

// A container whose command is an init gets 900 for itself and every child,
// even when the spec asks runc for another value (as kubelet's always does).
func TestE2EMatchedContainer(t *testing.T) {
	e := runcEnv(t)
	b := e.container(t, "matched", "/sbin/init")
	script := "#!/bin/sh\necho self=$(cat /proc/self/oom_score_adj)\nsh -c 'echo child=$(cat /proc/self/oom_score_adj)'\n"
	if err := b.AddFile("/sbin/init", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	adj := 500
	b.Spec.Process.OOMScoreAdj = &adj
	res := runContainer(t, b, "oomguard-e2e-matched")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "self=900\n") || !strings.Contains(res.Stdout, "child=900\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestE2EUnmatchedContainer(t *testing.T) {
	e := runcEnv(t)
	b := e.container(t, "unmatched", "sh", "-c", "cat /proc/self/oom_score_adj")
	adj := 321
	b.Spec.Process.OOMScoreAdj = &adj
	res := runContainer(t, b, "oomguard-e2e-unmatched")
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "321" {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// A memory-limited container that hits a real OOM kill: the kernel's own
// report shows the victim carried the hook's value.
func TestE2EOOMKillCarriesScore(t *testing.T) {
	e := runcEnv(t)
	b := e.container(t, "oom", "/sbin/init")
	// tail keeps a line without newline in memory until the cgroup limit kills it.
	script := "#!/bin/sh\ncat /proc/self/oom_score_adj\ntail /dev/zero\necho survived=$?\n"
	if err := b.AddFile("/sbin/init", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b.SetMemoryLimit(32 << 20)
	res := runContainer(t, b, "oomguard-e2e-oom")
	if !strings.HasPrefix(res.Stdout, "900\n") || !strings.Contains(res.Stdout, "survived=137") {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		t.Fatalf("dmesg: %v", err)
	}
	re := regexp.MustCompile(`Killed process \d+ \(tail\).*oom_score_adj:(-?\d+)`)
	m := re.FindAllStringSubmatch(string(out), -1)
	if len(m) == 0 {
		t.Fatal("dmesg shows no OOM kill of tail")
	}
	if got := m[len(m)-1][1]; got != "900" {
		t.Fatalf("the kernel killed tail at oom_score_adj %s, want 900", got)
	}
}

// On a cgroup v1 host the hook says the group flag is unsupported and still
// sets the score; on v2 it clears the flag.
func TestE2EGroupReport(t *testing.T) {
	e := runcEnv(t)
	b := e.container(t, "group", "/sbin/init")
	if err := b.AddFile("/sbin/init", []byte("#!/bin/sh\ncat /proc/self/oom_score_adj\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := runContainer(t, b, "oomguard-e2e-group")
	if strings.TrimSpace(res.Stdout) != "900" {
		t.Fatalf("stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
	log, _ := os.ReadFile(e.logPath)
	if !regexp.MustCompile(`"oom_group":"(unsupported on cgroup v1|1→0|unchanged 0)`).Match(log) {
		t.Fatalf("hook log: %s", log)
	}
}

// crun (unlike runc) discards a hook's output and says only
// "error executing hook `…` (exit code: 1)". A strict failure's reason is
// then in the hook's log, which docs/troubleshooting.md sends crun users to. crun refuses
// this host's hybrid cgroups, so it runs in a mount namespace without the
// unified hierarchy, with its cgroup manager off.
func TestE2ECrunStrictFailureIsLogged(t *testing.T) {
	if _, err := exec.LookPath("crun"); err != nil {
		t.Fatalf("e2e needs crun (make deps): %v", err)
	}
	e := runcEnv(t)
	if err := os.WriteFile(e.cfg, []byte("strict = true\n[[rule]]\nname = 'x'\noom_score_adj = 5000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := runcbundle.New(filepath.Join(e.dir, "crun"), "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	b.AddHook(hookBin, "--config", e.cfg, "--log-file", e.logPath)
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := `grep -q " /sys/fs/cgroup/unified " /proc/self/mountinfo && umount /sys/fs/cgroup/unified
exec crun --cgroup-manager=disabled run --bundle "$1" oomguard-e2e-crun`
	out, err := exec.CommandContext(ctx, "unshare", "-m", "sh", "-c", script, "sh", b.Dir).CombinedOutput()
	if err == nil {
		t.Fatalf("a strict hook with a broken configuration let crun run the container: %s", out)
	}
	if !strings.Contains(string(out), "exit code: 1") {
		t.Fatalf("crun's error: %s", out)
	}
	log, _ := os.ReadFile(e.logPath)
	if !strings.Contains(string(log), "oom_score_adj") || !strings.Contains(string(log), e.cfg) {
		t.Fatalf("the hook's log does not say what was wrong (crun said %q):\n%s", out, log)
	}
}
