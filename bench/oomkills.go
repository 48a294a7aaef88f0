package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/test/nriruntime"
)

func init() { sections = append(sections, section{"oomkills", benchOOMKills}) }

// Sizes of the OOM-kill section; smaller in a smoke run.
var killRounds, watchedCtrs = 40, 2000

// benchOOMKills measures the real oomguard-nri reporting real OOM kills: a
// runaway meets the limit of a memory cgroup on this host, over and over,
// and the plugin (2,000 containers known through NRI) reports each from
// the kernel's log; its delay after the kernel's record, against the
// memory.events poll it replaces (every nri.verify_interval, 60 s: a kill
// waits for the next poll), and the plugin's idle CPU and RSS.
func benchOOMKills(int) (bool, error) {
	if os.Geteuid() != 0 {
		fmt.Println("oomkills: needs root (a memory cgroup, /dev/kmsg): skipped")
		return true, nil
	}
	if smoke {
		killRounds, watchedCtrs = 3, 100
	}
	plugin, err := built("oomguard-nri")
	if err != nil {
		return false, err
	}
	guest, err := testBinary("guest")
	if err != nil {
		return false, err
	}
	return withDir("oomguard-bench-oom", func(dir string) (bool, error) {
		hog := filepath.Join(dir, "hog") // the guest allocates until killed when called hog
		if err := os.Symlink(guest, hog); err != nil {
			return false, err
		}
		cg, cleanup, err := benchMemcg(32 << 20)
		if err != nil {
			return false, err
		}
		defer cleanup()

		nriruntime.SetLog(io.Discard)
		cfg, _ := filepath.Abs("deploy/config.toml")
		rt, cmd, log, stop, err := runPlugin(dir, plugin, nil, nil, "--config", cfg) // it waited for the plugin's Synchronize
		if err != nil {
			return false, err
		}
		defer stop()
		for i := range watchedCtrs {
			pod := nriruntime.KubeletPod(strconv.Itoa(i), "ml", "guaranteed", "runc", nil)
			ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
			if _, err := rt.Create(pod, ctr); err != nil {
				return false, err
			}
			if err := rt.StartContainer(pod, ctr); err != nil {
				return false, err
			}
		}
		// Idle: nothing happens for 10 s but the plugin's own timers.
		cpu0 := procCPU(cmd.Process.Pid)
		idle := 10 * time.Second
		if smoke {
			idle = time.Second
		}
		time.Sleep(idle)
		idleCPU := float64(procCPU(cmd.Process.Pid)-cpu0) / float64(idle)
		rss, _ := procRSS(cmd.Process.Pid)

		re := regexp.MustCompile(`msg="OOM kill" .*command=hog .*reported_after=(\S+)`)
		var lags, polled []time.Duration
		start := kmsg.Now()
		for i := range killRounds {
			before := len(re.FindAllStringSubmatch(log.String(), -1))
			run := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2"`, "sh", cg, hog)
			if err := run.Run(); err == nil {
				return false, fmt.Errorf("round %d: the runaway was not killed", i)
			}
			killed := kmsg.Now()
			deadline := time.Now().Add(10 * time.Second)
			for len(re.FindAllStringSubmatch(log.String(), -1)) == before && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			m := re.FindAllStringSubmatch(log.String(), -1)
			if len(m) == before {
				return false, fmt.Errorf("round %d: the plugin did not report the kill:\n%s", i, tail(log.String(), 10))
			}
			d, err := time.ParseDuration(m[len(m)-1][1])
			if err != nil {
				return false, err
			}
			lags = append(lags, d)
			// The poll it replaces: the next look at memory.events, every 60 s
			// from the plugin's start.
			polled = append(polled, time.Minute-(killed-start)%time.Minute)
		}
		p50, p99 := quantile(lags, .5), quantile(lags, .99)
		b50, b99 := quantile(polled, .5), quantile(polled, .99)
		okLag, okCPU, okRSS := p99 <= time.Second, idleCPU <= 0.001, rss <= 30<<20
		fmt.Printf("oomkills: %d OOM kills in a 32 MiB memory cgroup, the plugin knowing %d containers\n", killRounds, watchedCtrs)
		fmt.Printf("  reported after the kernel's record: p50 %s p99 %s; the 60 s memory.events poll: p50 %s p99 %s (goal p99 ≤ 1 s): %s\n",
			ms(p50), ms(p99), b50.Round(time.Second), b99.Round(time.Second), verdict(okLag))
		fmt.Printf("  idle CPU %.3f%% of a core (goal ≤ 0.1%%): %s; RSS %.1f MB (goal ≤ 30 MB): %s\n",
			idleCPU*100, verdict(okCPU), float64(rss)/(1<<20), verdict(okRSS))
		return okLag && okCPU && okRSS, nil
	})
}

// benchMemcg makes a memory cgroup of limit bytes on this host (cgroup v1's
// memory hierarchy, or v2's root), and a function that removes it.
func benchMemcg(limit int64) (string, func(), error) {
	return benchMemcgNamed(fmt.Sprintf("oomguard-bench-%d", os.Getpid()), limit)
}

// memcgRoot is the root of this host's memory cgroups.
func memcgRoot() string {
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		return "/sys/fs/cgroup/memory"
	}
	return "/sys/fs/cgroup"
}

func benchMemcgNamed(name string, limit int64) (string, func(), error) {
	dir, file := filepath.Join(memcgRoot(), name), "memory.limit_in_bytes"
	if memcgRoot() == "/sys/fs/cgroup" {
		file = "memory.max"
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("a memory cgroup: %w", err)
	}
	cleanup := func() { os.Remove(dir) }
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("limit %s: %w", dir, err)
	}
	return dir, cleanup, nil
}

// procCPU is the CPU time pid has used, all its threads: their schedstat
// (nanoseconds), else its stat (user and system, in ticks).
func procCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var ns int64
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			ns += v
		}
	}
	if ns > 0 {
		return time.Duration(ns)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
