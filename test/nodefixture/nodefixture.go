// Package nodefixture writes a node's /proc and /sys as files under a
// directory, for the doctor's tests and benchmark: processes with their
// stat, status, comm, cmdline, scores and cgroup, and any other file given.
package nodefixture

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Proc is one process of a fixture node; its oom_score follows the
// kernel's formula over its memory and the node's (proc/meminfo).
type Proc struct {
	Pid, PPid int
	Comm      string
	Cmdline   string // NUL-separated
	Adj       int
	RSSKB     int64  // resident kB; page tables add 1/512 of it
	Cgroup    string // unified path; "" for /
	Kernel    bool   // a kernel thread
}

// Meminfo is the incident node's: 192 GiB of RAM, no swap, 170 GiB available (GPU drivers, page cache and the other pods hold the rest).
const Meminfo = "MemTotal:       201326592 kB\nMemFree:        180000000 kB\nMemAvailable:   178257920 kB\nSwapTotal:             0 kB\n"

// oomScore is /proc/PID/oom_score as Linux 6.1 computes it (oom_badness in
// mm/oom_kill.c, proc_oom_score in fs/proc/base.c), for 4 KiB pages.
func oomScore(p Proc, totalPages int64) int64 {
	if p.Kernel || p.Adj == -1000 {
		return 0
	}
	points := p.RSSKB/4 + pteKB(p)/4 + int64(p.Adj)*(totalPages/1000)
	return max(0, (1000+points*1000/totalPages)*2/3)
}

func pteKB(p Proc) int64 { return p.RSSKB / 512 }

// memKB reads "Key: N kB" from a meminfo text.
func memKB(meminfo, key string) int64 {
	var v int64
	for _, line := range strings.Split(meminfo, "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &v)
		}
	}
	return v
}

// Missing as a file's content leaves the file out.
const Missing = "<missing>"

// Write writes procs and files under root; a process's cgroup is written as a
// cgroup v2 "0::" line.
func Write(root string, procs []Proc, files map[string]string) error {
	meminfo, ok := files["proc/meminfo"]
	if meminfo == Missing {
		meminfo = Meminfo // for the scores only
	} else if !ok {
		meminfo = Meminfo
		if err := writeFile(root, "proc/meminfo", meminfo); err != nil {
			return err
		}
	}
	totalPages := (memKB(meminfo, "MemTotal") + memKB(meminfo, "SwapTotal")) / 4
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
			"status":        status(p),
			"comm":          p.Comm + "\n",
			"cmdline":       p.Cmdline,
			"oom_score":     fmt.Sprint(oomScore(p, totalPages)),
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

func status(p Proc) string {
	s := fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t%d\n", p.Comm, p.Pid, p.Pid, p.PPid)
	if !p.Kernel {
		s += fmt.Sprintf("VmPeak:\t%8d kB\nVmSize:\t%8d kB\nVmRSS:\t%8d kB\nRssAnon:\t%8d kB\nVmPTE:\t%8d kB\nVmSwap:\t%8d kB\n",
			p.RSSKB*2, p.RSSKB*2, p.RSSKB, p.RSSKB, pteKB(p), 0)
	}
	return s + "Threads:\t1\nCpus_allowed_list:\t0-3\n"
}

func writeFile(root, p, content string) error {
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, []byte(content), 0o644)
}
