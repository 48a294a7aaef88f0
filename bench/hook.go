package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/oomguard/oomguard/test/testbin"
	"github.com/opencontainers/runtime-spec/specs-go"
)

func init() { sections = append(sections, section{"hook", benchHook}) }

// benchHook times oomguard-hook on a real OCI state and bundle, with the
// shipped configuration, against /bin/true fed the same stdin.
func benchHook(n int) (bool, error) {
	hook, err := built("oomguard-hook")
	if err != nil {
		return false, err
	}
	return withDir("oomguard-bench", func(dir string) (bool, error) {

		cfg, logFile, err := hookConfig(dir)
		if err != nil {
			return false, err
		}
		victim := exec.Command("sleep", "600")
		if err := victim.Start(); err != nil {
			return false, err
		}
		defer func() { victim.Process.Kill(); victim.Wait() }()

		sp := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/sbin/init"}},
			Annotations: map[string]string{"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.container-name": "main"}}
		data, _ := json.Marshal(sp)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
			return false, err
		}
		state, _ := json.Marshal(specs.State{Version: specs.Version, ID: "bench", Status: specs.StateCreating, Pid: victim.Process.Pid, Bundle: dir})

		withStdin := func(path string, args ...string) func() *exec.Cmd {
			return func() *exec.Cmd {
				c := exec.Command(path, args...)
				c.Stdin = strings.NewReader(string(state))
				return c
			}
		}
		floor, err := floorBinary(dir)
		if err != nil {
			return false, err
		}
		times, err := timeCommands(n, withStdin("/bin/true"), withStdin(floor), withStdin(hook, "--config", cfg))
		if err != nil {
			return false, err
		}
		if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), "rule=init-as-pid1") {
			return false, fmt.Errorf("the hook did not decide as expected; its log:\n%s", log)
		}
		base, goFloor, med := quantile(times[0], .5), quantile(times[1], .5), quantile(times[2], .5)
		ratio, goRatio := float64(med)/float64(base), float64(med)/float64(goFloor)
		fmt.Printf("oomguard-hook: wall time per invocation, %d runs each, interleaved\n", n)
		printTimes([]string{"/bin/true (same stdin)", "empty Go program (same flags)", "oomguard-hook (shipped config)"}, times)
		fmt.Printf("  ratio to the empty Go program: %.2f× (goal ≤ 1.3×): %s\n", goRatio, verdict(goRatio <= 1.3))
		fmt.Printf("  ratio to /bin/true: %.2f× (goal ≤ 3×): %s\n", ratio, verdict(ratio <= 3))
		fmt.Printf("  median: %s (goal ≤ 3 ms): %s; an empty Go program takes %s here, %.2f× /bin/true\n",
			ms(med), verdict(med <= 3*time.Millisecond), ms(goFloor), float64(goFloor)/float64(base))
		return goRatio <= 1.3 && ratio <= 3 && med <= 3*time.Millisecond, nil
	})
}

// hookConfig writes the shipped configuration into dir with the hook logging
// there, and returns both paths.
func hookConfig(dir string) (cfg, logFile string, err error) {
	cfg, logFile = filepath.Join(dir, "config.toml"), filepath.Join(dir, "hook.log")
	conf, err := testbin.ShippedConfig(logFile)
	if err != nil {
		return "", "", err
	}
	return cfg, logFile, os.WriteFile(cfg, conf, 0o644)
}
