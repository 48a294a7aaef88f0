package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func init() { sections = append(sections, section{"doctor", benchDoctor}) }

// benchDoctor times a full report on a fixture node of 20,000 processes in
// 400 containers, and on this machine's /proc beside the investigation's
// Python script (oom_info.py, from the incident notes).
func benchDoctor(int) (bool, error) {
	bin, err := built("oomguard-doctor")
	if err != nil {
		return false, err
	}
	dir, err := os.MkdirTemp("", "oomguard-bench-doctor")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "writing a fixture node of 20,000 processes…")
	root := filepath.Join(dir, "node")
	if err := fixtureNode(root, 20000, 400); err != nil {
		return false, err
	}
	measure := func(name string, args ...string) (time.Duration, int64, error) {
		cmd := exec.Command(name, args...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() <= 2 && strings.HasSuffix(name, "oomguard-doctor") {
			err = nil // exit 1 and 2 are findings
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %v: %s", name, err, out)
		}
		return d, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10, nil
	}
	fixT, fixRSS, err := measure(bin, "--root", root, "--sample", "0", "--json")
	if err != nil {
		return false, err
	}
	ok := fixT <= time.Second && fixRSS <= 50<<20
	fmt.Println("oomguard-doctor: full report")
	fmt.Printf("  %-48s %10s %12s\n", "", "wall", "peak RSS")
	fmt.Printf("  %-48s %10s %9.1f MB   (goal ≤ 1 s, ≤ 50 MB): %s\n", "fixture node, 20,000 processes, 400 containers", ms(fixT), float64(fixRSS)/(1<<20), verdict(ok))
	realT, realRSS, err := measure(bin, "--sample", "0", "--tree")
	if err != nil {
		return false, err
	}
	fmt.Printf("  %-48s %10s %9.1f MB\n", "this machine's /proc, with --tree", ms(realT), float64(realRSS)/(1<<20))
	script, err := ominfoScript(dir)
	if err != nil {
		fmt.Printf("  %-48s (skipped: %v)\n", "oom_info.py on this machine's /proc", err)
		return ok, nil
	}
	pyT, pyRSS, err := measure("python3", script)
	if err != nil {
		fmt.Printf("  %-48s (failed: %v)\n", "oom_info.py on this machine's /proc", err)
		return ok, nil
	}
	fmt.Printf("  %-48s %10s %9.1f MB\n", "oom_info.py on this machine's /proc", ms(pyT), float64(pyRSS)/(1<<20))
	return ok, nil
}

// fixtureNode writes procs processes spread over ctrs containers.
func fixtureNode(root string, procs, ctrs int) error {
	w := func(p, c string) error {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		return os.WriteFile(full, []byte(c), 0o644)
	}
	files := map[string]string{
		"sys/fs/cgroup/cgroup.controllers": "cpu memory pids",
		"sys/fs/cgroup/cgroup.stat":        "nr_descendants 1200\nnr_dying_descendants 300\n",
		"proc/sys/vm/oom_dump_tasks":       "1\n",
		"proc/sys/kernel/printk":           "7 4 1 7\n",
		"proc/sys/kernel/osrelease":        "6.1.0\n",
		"proc/consoles":                    "ttyS0 -W- (EC p a) 4:64\n",
		"proc/cmdline":                     "console=ttyS0,115200n8\n",
		"proc/interrupts":                  "  CPU0 CPU1\n 30: 5 100 PCI-MSI 1-edge eth0-Tx-Rx-0\n",
		"proc/stat":                        "cpu  1 0 1 8 0 0 0 0\ncpu0 1 0 1 8 0 0 0 0\n",
	}
	for p, c := range files {
		if err := w(p, c); err != nil {
			return err
		}
	}
	for i := 1; i <= procs; i++ {
		cg, ppid, comm, adj := "/system.slice/sshd.service", 1, "sshd", 0
		if i > 100 {
			c := i % ctrs
			cg = fmt.Sprintf("/kubepods.slice/kubepods-pod%08x_0000_0000_0000_%012x.slice/cri-containerd-%064x.scope", c, c, c)
			comm, adj, ppid = "python3", -997, i-1
			if i%(procs/ctrs) == 0 {
				comm, ppid = "systemd", 1
				if err := w("sys/fs/cgroup"+cg+"/memory.oom.group", "1\n"); err != nil {
					return err
				}
			}
		}
		d := fmt.Sprintf("proc/%d/", i)
		for name, c := range map[string]string{
			"stat":          fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 0 0 0 0\n", i, comm, ppid, i, i),
			"cmdline":       "/usr/bin/" + comm + "\x00--flag\x00",
			"oom_score":     "0",
			"oom_score_adj": fmt.Sprint(adj),
			"cgroup":        "0::" + cg + "\n",
		} {
			if err := w(d+name, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// ominfoScript extracts the investigation's script from the incident notes.
func ominfoScript(dir string) (string, error) {
	seeds, _ := filepath.Glob("../shared/seeds/*.txt")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		text := string(b)
		start := strings.Index(text, "import re\n")
		end := strings.Index(text, "render(1)")
		if start < 0 || end < start || !strings.Contains(text[start:end], "oom_score_adj") {
			continue
		}
		p := filepath.Join(dir, "oom_info.py")
		return p, os.WriteFile(p, []byte(text[start:end+len("render(1)")]+"\n"), 0o644)
	}
	return "", fmt.Errorf("the incident notes (../shared/seeds) are not here")
}
