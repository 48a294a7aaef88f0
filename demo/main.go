// Command demo shows what oomguard changes: the same "VM-like" container,
// with an init as PID 1, run twice with the real runc — once as the runtime
// makes it, once with oomguard-hook — and what each process ended up with.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/runcbundle"
)

// The container's "init" reports what the kernel would weigh it and a child by.
const initScript = `#!/bin/sh
echo "pid1=$$ adj=$(cat /proc/self/oom_score_adj)"
sh -c 'echo "child=$$ adj=$(cat /proc/self/oom_score_adj)"'
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := runcbundle.Available(); err != nil {
		return fmt.Errorf("%w (make demo installs what it needs; run it as root)", err)
	}
	hook, err := filepath.Abs("bin/oomguard-hook")
	if err != nil {
		return err
	}
	if _, err := os.Stat(hook); err != nil {
		return fmt.Errorf("%s is missing: run make build", hook)
	}
	dir, err := os.MkdirTemp("", "oomguard-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	shipped, err := os.ReadFile("deploy/config.toml")
	if err != nil {
		return err
	}
	logFile := filepath.Join(dir, "hook.log")
	cfg := filepath.Join(dir, "config.toml")
	conf := strings.Replace(string(shipped), `file = "/var/log/oomguard-hook.log"`, fmt.Sprintf("file = %q", logFile), 1)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return err
	}

	fmt.Println("oomguard demo: one container whose PID 1 is an init (like systemd in a VM-like pod),")
	fmt.Println("run twice with runc: as the runtime makes it, then with oomguard-hook and deploy/config.toml.")
	fmt.Println()
	without, err := runOnce(filepath.Join(dir, "without"), "")
	if err != nil {
		return err
	}
	with, err := runOnce(filepath.Join(dir, "with"), hook, "--config", cfg)
	if err != nil {
		return err
	}
	mode := kernel.DetectMode("/")
	group := "absent (cgroup " + mode.String() + ")"
	if mode == kernel.ModeV2 {
		group = "see the hook's log"
	}
	fmt.Printf("  %-26s %-22s %s\n", "", "without oomguard", "with oomguard-hook")
	fmt.Printf("  %-26s %-22s %s\n", "PID 1 oom_score_adj", without["pid1"], with["pid1"])
	fmt.Printf("  %-26s %-22s %s\n", "its child's oom_score_adj", without["child"], with["child"])
	fmt.Printf("  %-26s %-22s %s\n", "memory.oom.group", group, group)
	fmt.Println()
	log, _ := os.ReadFile(logFile)
	fmt.Println("The hook's log line for the second run:")
	fmt.Println("  " + strings.TrimSpace(string(log)))
	fmt.Println()
	fmt.Printf("Without oomguard, every process in the pod keeps the runtime's score (%s here; kubelet\n", without["pid1"])
	fmt.Println("gives Guaranteed pods -997), so in a global OOM the kernel kills node daemons at 0 —")
	fmt.Println("sshd, systemd-networkd, kubelet — before the pod's runaway process.")
	fmt.Printf("With oomguard, PID 1 and everything it starts run at %s: the runaway dies first.\n", with["pid1"])
	if mode != kernel.ModeV2 {
		fmt.Println("This host's memory controller is on cgroup v1, which has no memory.oom.group; on cgroup v2")
		fmt.Println("the hook also turns it off,")
		fmt.Println("so a container OOM kills the runaway process, not the whole container.")
	}
	return nil
}

func runOnce(dir, hook string, hookArgs ...string) (map[string]string, error) {
	b, err := runcbundle.New(dir, "/sbin/init")
	if err != nil {
		return nil, err
	}
	if err := b.AddFile("/sbin/init", []byte(initScript), 0o755); err != nil {
		return nil, err
	}
	if hook != "" {
		b.AddHook(hook, hookArgs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := b.Run(ctx, "oomguard-demo-"+filepath.Base(dir))
	if err != nil || res.ExitCode != 0 {
		return nil, fmt.Errorf("runc run: %v, exit %d: %s", err, res.ExitCode, res.Stderr)
	}
	got := map[string]string{}
	for _, line := range strings.Split(res.Stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			who, _, _ := strings.Cut(f[0], "=")
			got[who] = strings.TrimPrefix(f[1], "adj=")
		}
	}
	return got, nil
}
