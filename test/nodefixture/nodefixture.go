// Package nodefixture writes a node's /proc and /sys as files under a
// directory, for the doctor's tests and benchmark: processes with their
// stat, status, comm, cmdline, scores and cgroup, and any other file given.
package nodefixture

import (
	"fmt"
	"os"
	"path/filepath"
)

// Proc is one process of a fixture node.
type Proc struct {
	Pid, PPid  int
	Comm       string
	Cmdline    string // NUL-separated
	Score, Adj int
	Cgroup     string // unified path; "" for /
	Kernel     bool   // a kernel thread
}

// Missing as a file's content leaves the file out.
const Missing = "<missing>"

// Write writes procs and files under root; a process's cgroup is written as a
// cgroup v2 "0::" line.
func Write(root string, procs []Proc, files map[string]string) error {
	for _, p := range procs {
		d := fmt.Sprintf("proc/%d/", p.Pid)
		flags := 0x400000 // PF_RANDOMIZE, as user tasks have
		if p.Kernel {
			flags = 0x00200000 // PF_KTHREAD
		}
		cg := p.Cgroup
		if cg == "" {
			cg = "/"
		}
		for name, c := range map[string]string{
			"stat":          fmt.Sprintf("%d (%s) S %d %d %d 0 -1 %d 0 0 0 0\n", p.Pid, p.Comm, p.PPid, p.Pid, p.Pid, flags),
			"status":        fmt.Sprintf("Name:\t%s\nState:\tS (sleeping)\nTgid:\t%d\nPid:\t%d\nPPid:\t%d\n", p.Comm, p.Pid, p.Pid, p.PPid),
			"comm":          p.Comm + "\n",
			"cmdline":       p.Cmdline,
			"oom_score":     fmt.Sprint(p.Score),
			"oom_score_adj": fmt.Sprint(p.Adj),
			"cgroup":        "0::" + cg + "\n",
		} {
			if err := writeFile(root, d+name, c); err != nil {
				return err
			}
		}
	}
	for p, c := range files {
		if c == Missing {
			continue
		}
		if err := writeFile(root, p, c); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(root, p, content string) error {
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, []byte(content), 0o644)
}
