package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/oomguard/oomguard/test/runcbundle"
)

func init() { sections = append(sections, section{"podman", benchPodman}) }

// benchPodman times `podman run` (Debian's podman and runc, a VM-like image)
// with oomguard-hook installed in its hooks directory against an empty one.
func benchPodman(n int) (bool, error) {
	hook, err := built("oomguard-hook")
	if err != nil {
		return false, err
	}
	if _, err := exec.LookPath("podman"); err != nil {
		return false, fmt.Errorf("podman: %w (run make deps)", err)
	}
	n = min(n, 30) // a podman run takes about a second
	return withDir("ogb-", func(dir string) (bool, error) {
		cfg, logFile, err := hookConfig(dir)
		if err != nil {
			return false, err
		}
		if hook, err = installed(dir, hook); err != nil {
			return false, err
		}
		empty, hooks := filepath.Join(dir, "empty.d"), filepath.Join(dir, "hooks.d")
		os.MkdirAll(empty, 0o755)
		if out, err := exec.Command(hook, "install", "--hooks-dir", hooks, "--hook-path", hook, "--config", cfg).CombinedOutput(); err != nil {
			return false, fmt.Errorf("oomguard-hook install: %v: %s", err, out)
		}
		const ref = "localhost/oomguard/bench-vm:1"
		img, err := runcbundle.BusyboxImage(map[string]runcbundle.ImageFile{
			"/sbin/init": {Data: []byte("#!/bin/sh\nexit 0\n"), Mode: 0o755},
		}, []string{"/sbin/init"})
		if err != nil {
			return false, err
		}
		if err := runcbundle.WriteOCIArchive(filepath.Join(dir, "img.tar"), ref, img); err != nil {
			return false, err
		}
		// Root here may lack CAP_SYS_RESOURCE: ulimits below the hard limits.
		podman := func(hooksDir string, args ...string) *exec.Cmd {
			base := []string{"--root", dir + "/storage", "--runroot", dir + "/run", "--storage-driver", "vfs",
				"--cgroup-manager", "cgroupfs", "--events-backend", "none", "--hooks-dir", hooksDir}
			return exec.Command("podman", append(base, args...)...)
		}
		if out, err := podman(empty, "load", "-i", filepath.Join(dir, "img.tar")).CombinedOutput(); err != nil {
			return false, fmt.Errorf("podman load: %v: %s", err, out)
		}
		run := func(hooksDir string) func() *exec.Cmd {
			return func() *exec.Cmd {
				return podman(hooksDir, "run", "--rm", "--runtime", "runc", "--network", "none",
					"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000", ref)
			}
		}
		times, err := timeCommands(n, run(empty), run(hooks))
		if err != nil {
			return false, err
		}
		if log, _ := os.ReadFile(logFile); strings.Count(string(log), "rule=init-as-pid1") < n {
			return false, fmt.Errorf("the hook did not run for every container; its log:\n%s", log)
		}
		ratio := float64(quantile(times[1], .5)) / float64(quantile(times[0], .5))
		fmt.Printf("podman run (runc, a VM-like image): wall time per container, %d runs each, interleaved\n", n)
		printTimes([]string{"without the hook", "with oomguard-hook"}, times)
		fmt.Printf("  ratio: %.3f× (goal ≤ 1.05×): %s\n", ratio, verdict(ratio <= 1.05))
		return ratio <= 1.05, nil
	})
}
