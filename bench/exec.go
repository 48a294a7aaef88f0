package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
)

func init() { sections = append(sections, section{"exec", benchExec}) }

// Sizes of the exec section; smaller in a smoke run.
var execCount, probePods, probeSeconds = 1000, 100, 20

// benchExec measures what the node's execs cost the real oomguard-nri
// (its CPU, all threads): execs outside every container, in a container
// it does not guard, and in one it guards; and a node where each of 100
// pods runs an exec probe every second. The plugin watches execs in the
// kernel by cgroup (eBPF) on cgroup v2, through the process connector
// otherwise; the section says which.
func benchExec(int) (bool, error) {
	if os.Geteuid() != 0 {
		fmt.Println("exec: needs root (cgroups, the kernel's process events): skipped")
		return true, nil
	}
	if smoke {
		execCount, probePods, probeSeconds = 50, 5, 1
	}
	plugin, err := built("oomguard-nri")
	if err != nil {
		return false, err
	}
	nriruntime.SetLog(io.Discard)
	return withDir("oomguard-bench-exec", func(dir string) (bool, error) {
		cfg, _ := filepath.Abs("deploy/config.toml")
		rt, cmd, log, stop, err := runPlugin(dir, plugin, nil, nil, "--config", cfg)
		if err != nil {
			return false, err
		}
		defer stop()
		mode := kernel.DetectMode("/")
		// Containers as the runtime makes them: a cgroup with a process.
		var cleanups []func()
		defer func() {
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
		}()
		container := func(uid string, guarded bool) (string, error) {
			args := "/app"
			if guarded {
				args = "/sbin/init" // the shipped rule init-as-pid1
			}
			pod := nriruntime.KubeletPod(uid, "bench", "burstable", "runc", nil)
			ctr := nriruntime.KubeletContainer(pod, "main", 500, args)
			cg, err := kernel.ResolveCgroupsPath(ctr.Linux.CgroupsPath)
			if err != nil {
				return "", err
			}
			dir := kernel.MemoryCgroupDir("/", mode, cg)
			if mode == kernel.ModeV2 {
				if _, err := makeCgroup(cg); err != nil {
					return "", err
				}
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", fmt.Errorf("a container's cgroup: %w", err)
			}
			sleeper := exec.Command("sleep", "3600")
			if err := sleeper.Start(); err != nil {
				return "", err
			}
			cleanups = append(cleanups, func() {
				sleeper.Process.Kill()
				sleeper.Wait()
				for d := dir; strings.HasPrefix(d, "/sys/fs/cgroup/") && d != kernel.MemoryCgroupDir("/", mode, "/"); d = filepath.Dir(d) {
					os.Remove(d)
				}
			})
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
				return "", fmt.Errorf("into the container's cgroup: %w", err)
			}
			ctr.Pid = uint32(sleeper.Process.Pid)
			if _, err := rt.Create(pod, ctr); err != nil {
				return "", err
			}
			return dir, rt.StartContainer(pod, ctr)
		}
		guarded, err := container("exec-guarded", true)
		if err != nil {
			return false, err
		}
		unguarded, err := container("exec-other", false)
		if err != nil {
			return false, err
		}
		source := "process connector"
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			l := log.String()
			if strings.Contains(l, "eBPF, filtered by cgroup") {
				source = "eBPF, filtered by cgroup"
			}
			if strings.Contains(l, "watching execs") || time.Now().After(deadline) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond) // the filter learns the guarded cgroup
		// cost is the plugin's CPU while f runs, less its idle rate over as long.
		idleRate := func() float64 {
			c0, t0 := procCPU(cmd.Process.Pid), time.Now()
			time.Sleep(2 * time.Second)
			return float64(procCPU(cmd.Process.Pid)-c0) / float64(time.Since(t0))
		}
		idle := idleRate()
		cost := func(f func() error) (time.Duration, time.Duration, error) {
			c0, t0 := procCPU(cmd.Process.Pid), time.Now()
			if err := f(); err != nil {
				return 0, 0, err
			}
			time.Sleep(200 * time.Millisecond) // the last events read
			wall := time.Since(t0)
			return max(0, procCPU(cmd.Process.Pid)-c0-time.Duration(idle*float64(wall))), wall, nil
		}
		loop := fmt.Sprintf(`echo $$ > "$1/cgroup.procs" && i=0 && while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done`, execCount)
		inCgroup := func(cg string) func() error {
			return func() error { return exec.Command("sh", "-c", loop, "sh", cg).Run() }
		}
		outside := func() error {
			for range execCount {
				if err := exec.Command("/bin/true").Run(); err != nil {
					return err
				}
			}
			return nil
		}
		per := func(d time.Duration) float64 {
			return float64(d) / float64(time.Millisecond) * 1000 / float64(execCount)
		}
		cOut, _, err := cost(outside)
		if err != nil {
			return false, err
		}
		cOther, _, err := cost(inCgroup(unguarded))
		if err != nil {
			return false, err
		}
		cGuarded, _, err := cost(inCgroup(guarded))
		if err != nil {
			return false, err
		}
		// Exec probes: each pod's container runs a command every second,
		// spread over the second as kubelet's probers are.
		var probeCgs []string
		for i := range probePods {
			cg, err := container("probe-"+strconv.Itoa(i), false)
			if err != nil {
				return false, err
			}
			probeCgs = append(probeCgs, cg)
		}
		probe := `echo $$ > "$1/cgroup.procs" && exec /bin/true`
		cProbes, wall, err := cost(func() error {
			tick := time.Second / time.Duration(len(probeCgs))
			for s := 0; s < probeSeconds; s++ {
				for _, cg := range probeCgs {
					t := time.Now()
					if err := exec.Command("sh", "-c", probe, "sh", cg).Run(); err != nil {
						return err
					}
					time.Sleep(tick - time.Since(t))
				}
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		probeShare := float64(cProbes) / float64(wall)
		okOther, okProbes := per(cOther) <= 1 && per(cOut) <= 1, probeShare <= 0.001
		fmt.Printf("exec: the plugin's CPU (all threads, less its idle rate) for the node's execs; %d execs each; source: %s\n", execCount, source)
		fmt.Printf("  %-58s %8.2f ms per 1,000 execs\n", "outside every container", per(cOut))
		fmt.Printf("  %-58s %8.2f ms per 1,000 execs\n", "in a container oomguard does not guard", per(cOther))
		fmt.Printf("  %-58s %8.2f ms per 1,000 execs\n", "in a guarded container (each exec'd process checked)", per(cGuarded))
		fmt.Printf("  not guarded: near zero, ≤ 1 ms per 1,000 (was 100 ms through /proc): %s\n", verdict(okOther))
		fmt.Printf("  %d pods, an exec probe each every second, %d s: %.3f%% of a core beside its idle %.3f%% (goal ≤ 0.1%%): %s\n",
			len(probeCgs), probeSeconds, probeShare*100, idle*100, verdict(okProbes))
		return okOther && okProbes, nil
	})
}
