package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/flood"
	"github.com/oomguard/oomguard/test/nriruntime"
)

func init() { sections = append(sections, section{"nri", benchNRI}) }

// benchNRI measures oomguard-nri through NRI's runtime side: the creation
// path's round trips (CreateContainer, then StartContainer, where the
// plugin writes) beside a no-op plugin subscribed to CreateContainer only,
// on a tree where each container's writes really happen (the host's
// cgroup v2 tree, else a fixture tree made like a node's); its memory
// after 10,000 containers, Synchronize of 400 running containers, and the
// creation path while its metrics port is flooded.
func benchNRI(int) (bool, error) {
	plugin, err := built("oomguard-nri")
	if err != nil {
		return false, err
	}
	nriruntime.SetLog(io.Discard)
	cfg, _ := filepath.Abs("deploy/config.toml")
	return withDir("oomguard-bench-nri", func(dir string) (bool, error) {
		noop, err := program(dir, "noop")
		if err != nil {
			return false, err
		}
		tree, err := newNodeTree(dir)
		if err != nil {
			return false, err
		}
		defer tree.close()

		start := func(name, bin string, args ...string) (*nriruntime.Runtime, *exec.Cmd, *bytes.Buffer, error) {
			d := filepath.Join(dir, name)
			os.MkdirAll(d, 0o755)
			rt, err := nriruntime.Start(d, nil, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			var log bytes.Buffer
			rt.PluginLog = &syncWriter{w: &log}
			cmd, err := rt.StartPlugin(bin, args...)
			return rt, cmd, &log, err
		}
		rtNoop, cmdNoop, _, err := start("n", noop)
		if err != nil {
			return false, err
		}
		defer func() { cmdNoop.Process.Kill(); cmdNoop.Wait(); rtNoop.Stop() }()
		rtOG, cmdOG, _, err := start("o", plugin, append([]string{"--config", cfg}, tree.args()...)...)
		if err != nil {
			return false, err
		}
		defer func() { cmdOG.Process.Kill(); cmdOG.Wait(); rtOG.Stop() }()

		rounds := nriRounds
		var tNoop, tOG []time.Duration
		type live struct {
			pod *api.PodSandbox
			ctr *api.Container
		}
		var running []live
		for i := 0; i < rounds; i++ {
			pod := nriruntime.KubeletPod(strconv.Itoa(i), "ml", "burstable", "runc", nil)
			ctr := nriruntime.KubeletContainer(pod, "main", 500, "/sbin/init")
			// A node's churn: the oldest container goes once 500 run.
			if running = append(running, live{pod, ctr}); len(running) > liveCtrs {
				for _, rt := range []*nriruntime.Runtime{rtNoop, rtOG} {
					if err := rt.Remove(running[0].pod, running[0].ctr); err != nil {
						return false, err
					}
				}
				running = running[1:]
			}
			for _, x := range []struct {
				rt *nriruntime.Runtime
				ts *[]time.Duration
			}{{rtNoop, &tNoop}, {rtOG, &tOG}} {
				// The container as the runtime has made it by StartContainer:
				// its cgroup at kubelet's memory.oom.group, its init at kubelet's score.
				if err := tree.container(ctr); err != nil {
					return false, err
				}
				s := time.Now()
				if _, err := x.rt.Create(pod, ctr); err != nil {
					return false, err
				}
				if err := x.rt.StartContainer(pod, ctr); err != nil {
					return false, err
				}
				*x.ts = append(*x.ts, time.Since(s))
			}
		}
		if score, group := tree.last(); score != "900" || group != "0" {
			return false, fmt.Errorf("the plugin did not set the last container up (oom_score_adj %s, memory.oom.group %s)", score, group)
		}
		rss, hwm := procRSS(cmdOG.Process.Pid)
		p50n, p99n, p50o, p99o := quantile(tNoop, .5), quantile(tNoop, .99), quantile(tOG, .5), quantile(tOG, .99)
		r50, r99 := float64(p50o)/float64(p50n), float64(p99o)/float64(p99n)
		latOK := r50 <= 1.2 && r99 <= 1.2 && p99o <= time.Millisecond
		memOK := rss <= 30<<20
		fmt.Printf("oomguard-nri: the creation path (CreateContainer, StartContainer) through NRI's runtime side, %d containers each, interleaved; writes on %s\n", rounds, tree.name())
		printTimes([]string{"no-op plugin (CreateContainer only)", "oomguard-nri (shipped config)"}, [][]time.Duration{tNoop, tOG})
		fmt.Printf("  p50 %.2f×, p99 %.2f× the no-op (goal ≤ 1.2×); p99 %s (goal ≤ 1 ms): %s\n", r50, r99, ms(p99o), verdict(latOK))
		fmt.Printf("  RSS after %d containers, %d of them running: %.1f MB (peak %.1f MB) (goal ≤ 30 MB): %s\n", rounds, min(rounds, liveCtrs), float64(rss)/(1<<20), float64(hwm)/(1<<20), verdict(memOK))

		syncDur, err := benchSync(dir, plugin, cfg)
		if err != nil {
			return false, err
		}
		syncOK := syncDur <= time.Second
		fmt.Printf("  Synchronize of %d running containers (%d processes): %s (goal ≤ 1 s): %s\n", syncCtrs, 3*syncCtrs, ms(syncDur), verdict(syncOK))
		quiet, flooded, floodRSS, err := benchFlood(dir, plugin, cfg)
		if err != nil {
			return false, err
		}
		floodOK := floodRSS <= 64<<20
		fmt.Printf("\n  CreateContainer while the metrics port is flooded (%d idle, %d slow, %d near-1 MiB, %d keep-alive connections) beside a quiet run, %d containers each\n",
			flood.Default.Idle, flood.Default.Slow, flood.Default.Huge, flood.Default.KeepAlive, len(quiet))
		printTimes([]string{"quiet", "flooded"}, [][]time.Duration{quiet, flooded})
		fmt.Printf("  p99 %.2f× the quiet run; every container created and started; plugin peak RSS %.1f MB (goal ≤ the chart's 64 MiB): %s\n",
			float64(quantile(flooded, .99))/float64(quantile(quiet, .99)), float64(floodRSS)/(1<<20), verdict(floodOK))
		return latOK && memOK && syncOK && floodOK, nil
	})
}

var floodRounds = 300

// benchFlood times CreateContainer through the plugin while its metrics port
// is quiet and while it is flooded, and returns the plugin's peak RSS.
func benchFlood(dir, plugin, cfg string) (quiet, flooded []time.Duration, peak int64, err error) {
	d := filepath.Join(dir, "f")
	os.MkdirAll(d, 0o755)
	rt, err := nriruntime.Start(d, nil, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	defer rt.Stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, 0, err
	}
	addr := ln.Addr().String()
	ln.Close()
	rt.PluginLog = io.Discard
	cmd, err := rt.StartPlugin(plugin, "--config", cfg, "--metrics-address", addr)
	if err != nil {
		return nil, nil, 0, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	create := func(i int) (time.Duration, error) {
		pod := nriruntime.KubeletPod("f"+strconv.Itoa(i), "ml", "guaranteed", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
		s := time.Now()
		_, err := rt.Create(pod, ctr)
		if err == nil {
			err = rt.StartContainer(pod, ctr)
		}
		return time.Since(s), err
	}
	for i := range floodRounds {
		t, err := create(i)
		if err != nil {
			return nil, nil, 0, err
		}
		quiet = append(quiet, t)
	}
	ctx, stop := context.WithCancel(context.Background())
	_, wait := flood.Start(ctx, addr, flood.Default)
	time.Sleep(2 * time.Second) // let the flood build up
	for i := range floodRounds {
		t, err := create(floodRounds + i)
		if err != nil {
			stop()
			wait()
			return nil, nil, 0, fmt.Errorf("during the flood: %w", err)
		}
		flooded = append(flooded, t)
		if _, hwm := procRSS(cmd.Process.Pid); hwm > peak {
			peak = hwm
		}
	}
	stop()
	wait()
	return quiet, flooded, peak, nil
}

var nriRounds, syncCtrs, liveCtrs = 10000, 400, 500

// benchSync starts the plugin against a runtime that reports 400 running
// containers, on a cgroup v2 tree of theirs, and returns the plugin's own
// Synchronize time.
func benchSync(dir, plugin, cfg string) (time.Duration, error) {
	root := filepath.Join(dir, "node")
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	write := func(p, c string) {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	write("sys/fs/cgroup/cgroup.controllers", "memory")
	write("proc/1/cgroup", "0::/init.scope\n") // the plugin reads in the host's cgroup namespace
	pid := 100
	for i := 0; i < syncCtrs; i++ {
		pod := nriruntime.KubeletPod("s"+strconv.Itoa(i), "ml", "guaranteed", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
		pods, ctrs = append(pods, pod), append(ctrs, ctr)
		cg, err := kernel.ResolveCgroupsPath(ctr.Linux.CgroupsPath)
		if err != nil {
			return 0, err
		}
		var procs []string
		for j := 0; j < 3; j++ {
			pid++
			procs = append(procs, strconv.Itoa(pid))
			write("proc/"+strconv.Itoa(pid)+"/oom_score_adj", "-997\n")
			write("proc/"+strconv.Itoa(pid)+"/cgroup", "0::"+cg+"\n") // as on a node: the plugin writes only to a container's own processes
		}
		write("sys/fs/cgroup"+cg+"/memory.oom.group", "1\n")
		write("sys/fs/cgroup"+cg+"/cgroup.procs", strings.Join(procs, "\n")+"\n")
	}
	d := filepath.Join(dir, "s")
	os.MkdirAll(d, 0o755)
	_, _, log, stop, err := runPlugin(d, plugin, pods, ctrs, "--config", cfg, "--root", root)
	if err != nil {
		return 0, err
	}
	defer stop()
	re := regexp.MustCompile(`msg=synchronized .*containers=` + strconv.Itoa(syncCtrs) + ` .* duration=(\S+)`)
	var m []string
	for deadline := time.Now().Add(5 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = re.FindStringSubmatch(log.String())
	}
	if m == nil {
		return 0, fmt.Errorf("no synchronize line in the plugin's log:\n%s", log.String())
	}
	if b, _ := os.ReadFile(filepath.Join(root, "proc/101/oom_score_adj")); string(b) != "900\n" {
		return 0, fmt.Errorf("synchronize did not fix the processes (pid 101 has %q)", b)
	}
	return time.ParseDuration(m[1])
}

func procRSS(pid int) (rss, hwm int64) {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return rss, hwm
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// nodeTree is where the containers' writes land: the host's cgroup v2 tree
// (as root on a cgroup v2 host: a real cgroup and process a container),
// else a fixture tree made like a node's under --root.
type nodeTree struct {
	root    string // "" for the host's
	pid     int    // fixture: the next process; host: the one process, moved
	cg      string // the last container's cgroup
	sleeper *exec.Cmd
	made    []string
}

func newNodeTree(dir string) (*nodeTree, error) {
	if os.Geteuid() == 0 && kernel.DetectMode("/") == kernel.ModeV2 {
		s := exec.Command("sleep", "3600")
		if err := s.Start(); err != nil {
			return nil, err
		}
		return &nodeTree{sleeper: s, pid: s.Process.Pid}, nil
	}
	// In memory, as the kernel's files are: tmpfs where there is one.
	root, err := os.MkdirTemp("/dev/shm", "oomguard-bench-node")
	if err != nil {
		root = filepath.Join(dir, "node")
	}
	t := &nodeTree{root: root, pid: 1000}
	t.write("sys/fs/cgroup/cgroup.controllers", "cpu memory pids")
	t.write("proc/1/cgroup", "0::/init.scope\n")
	return t, nil
}

func (t *nodeTree) name() string {
	if t.root == "" {
		return "this host's cgroup v2 tree (a cgroup and a process a container)"
	}
	return "a fixture cgroup v2 tree made like a node's, at " + filepath.Dir(t.root) + " (this host has no cgroup v2 tree to write to)"
}

func (t *nodeTree) args() []string {
	if t.root == "" {
		return nil
	}
	return []string{"--root", t.root}
}

func (t *nodeTree) write(p, c string) {
	full := filepath.Join(t.root, p)
	os.MkdirAll(filepath.Dir(full), 0o755)
	os.WriteFile(full, []byte(c), 0o644)
}

// container makes ctr's cgroup and its init as the runtime has by
// StartContainer, and gives ctr its pid.
func (t *nodeTree) container(ctr *api.Container) error {
	cg, err := kernel.ResolveCgroupsPath(ctr.Linux.CgroupsPath)
	if err != nil {
		return err
	}
	if t.root != "" {
		t.pid++
		p := "proc/" + strconv.Itoa(t.pid)
		t.write(p+"/cgroup", "0::"+cg+"\n")
		t.write(p+"/oom_score_adj", "500\n")
		t.write("sys/fs/cgroup"+cg+"/memory.oom.group", "1\n")
		t.write("sys/fs/cgroup"+cg+"/cgroup.procs", strconv.Itoa(t.pid)+"\n")
	} else if t.cg != cg {
		dir, err := makeCgroup(cg)
		if err != nil {
			return err
		}
		t.made = append(t.made, dir)
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(t.pid)), 0); err != nil {
			return fmt.Errorf("into the container's cgroup: %w", err)
		}
		if t.cg != "" { // the last container and its pod's cgroup
			old := filepath.Join("/sys/fs/cgroup", t.cg)
			os.Remove(old)
			os.Remove(filepath.Dir(old))
		}
	}
	if t.root == "" {
		if err := os.WriteFile(filepath.Join("/sys/fs/cgroup", cg, "memory.oom.group"), []byte("1"), 0); err != nil {
			return err
		}
		if err := os.WriteFile("/proc/"+strconv.Itoa(t.pid)+"/oom_score_adj", []byte("500"), 0); err != nil {
			return err
		}
	}
	t.cg = cg
	ctr.Pid = uint32(t.pid)
	return nil
}

// last is the last container's score and group flag.
func (t *nodeTree) last() (score, group string) {
	root := cmp.Or(t.root, "/")
	proc, sys := filepath.Join(root, "proc", strconv.Itoa(t.pid)), filepath.Join(root, "sys/fs/cgroup", t.cg)
	s, _ := os.ReadFile(filepath.Join(proc, "oom_score_adj"))
	g, _ := os.ReadFile(filepath.Join(sys, "memory.oom.group"))
	return strings.TrimSpace(string(s)), strings.TrimSpace(string(g))
}

func (t *nodeTree) close() {
	if t.root != "" {
		os.RemoveAll(t.root)
	}
	if t.sleeper != nil {
		t.sleeper.Process.Kill()
		t.sleeper.Wait()
		time.Sleep(10 * time.Millisecond)
	}
	for i := len(t.made) - 1; i >= 0; i-- {
		for d := t.made[i]; d != "/sys/fs/cgroup" && strings.HasPrefix(d, "/sys/fs/cgroup/"); d = filepath.Dir(d) {
			os.Remove(d) // gone already, or still holding another
		}
	}
}

// makeCgroup makes cgroup cg on this host's cgroup v2 tree as kubelet and
// the runtime do: the memory and pids controllers enabled down to it.
func makeCgroup(cg string) (string, error) {
	dir := filepath.Join("/sys/fs/cgroup", cg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("a container's cgroup: %w", err)
	}
	for d := filepath.Dir(dir); strings.HasPrefix(d, "/sys/fs/cgroup"); d = filepath.Dir(d) {
		defer os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +pids"), 0) // from the root down
	}
	return dir, nil
}
