package main

import (
	"strconv"

	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"

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
		var removeCgroup func()
		defer func() {
			victim.Process.Kill()
			victim.Wait()
			if removeCgroup != nil {
				removeCgroup()
			}
		}()
		// The container's own cgroup, where the runtime puts its init, when
		// this host lets the bench make one: the hook's writes then happen.
		cgroupsPath, where := "", "the container's cgroup not made (not root): the hook refuses the write"
		if os.Geteuid() == 0 {
			cgroupsPath = "kubepods-burstable-podbench.slice:cri-containerd:hookbench"
			cg, done, err := containerCgroup(cgroupsPath, victim.Process.Pid)
			if err != nil {
				return false, err
			}
			removeCgroup = done
			where = "its writes on this host's " + cg
		}
		sp := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/sbin/init"}},
			Linux:       &specs.Linux{CgroupsPath: cgroupsPath},
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
		floor, err := program(dir, "floor")
		if err != nil {
			return false, err
		}
		hookFloor, err := program(dir, "hookfloor")
		if err != nil {
			return false, err
		}
		for _, p := range []*string{&floor, &hookFloor, &hook} {
			if *p, err = installed(dir, *p); err != nil {
				return false, err
			}
		}
		cache := filepath.Join(dir, "cache")
		times, err := timeCommands(n, withStdin("/bin/true"), withStdin(floor), withStdin(hookFloor),
			withStdin(hook, "--config", cfg, "--cache-dir", cache), withStdin(hook, "--config", cfg, "--cache-dir", ""))
		if err != nil {
			return false, err
		}
		if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), "rule=init-as-pid1") {
			return false, fmt.Errorf("the hook did not decide as expected; its log:\n%s", log)
		}
		base, goFloor, hookBase, med := quantile(times[0], .5), quantile(times[1], .5), quantile(times[2], .5), quantile(times[3], .5)
		hookRatio := float64(med) / float64(hookBase)
		fmt.Printf("oomguard-hook: wall time per invocation, %d runs each, interleaved; %s\n", n, where)
		printTimes([]string{"/bin/true (same stdin)", "empty Go program (same flags)", "minimal Go hook (bench/hookfloor)", "oomguard-hook (shipped config)", "  the same, parsing it every run"}, times)
		fmt.Printf("  ratio to the minimal Go hook, the floor of any Go hook (stdin, config.json, two writes): %.2f× (goal ≤ 1.2×): %s\n", hookRatio, verdict(hookRatio <= 1.2))
		fmt.Printf("  with no cache of the parsed configuration (a changed configuration's first run): %.2f×\n", float64(quantile(times[4], .5))/float64(hookBase))
		fmt.Printf("  for scale: the minimal hook is %.2f× an empty Go program, which is %.2f× /bin/true; oomguard-hook %.2f× the empty Go program\n",
			float64(hookBase)/float64(goFloor), float64(goFloor)/float64(base), float64(med)/float64(goFloor))
		return hookRatio <= 1.2, nil
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

// containerCgroup makes the cgroup of a container as kubelet and the
// runtime do on this host (cgroup v2, or v1's memory hierarchy), puts pid
// in it, and returns what it made and how to remove it.
func containerCgroup(cgroupsPath string, pid int) (string, func(), error) {
	cg, err := kernel.ResolveCgroupsPath(cgroupsPath)
	if err != nil {
		return "", nil, err
	}
	mode := kernel.DetectMode("/")
	dir := kernel.MemoryCgroupDir("/", mode, cg)
	if mode == kernel.ModeV2 {
		_, err = makeCgroup(cg)
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	}
	done := func() {
		for d := dir; d != kernel.MemoryCgroupDir("/", mode, "/"); d = filepath.Dir(d) {
			os.Remove(d)
		}
	}
	if err != nil {
		done()
		return "", nil, fmt.Errorf("a container's cgroup: %w", err)
	}
	return mode.String() + " cgroup " + cg, done, nil
}
