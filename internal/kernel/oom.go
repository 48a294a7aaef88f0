package kernel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// PageKB is the page size in kB.
var PageKB = int64(os.Getpagesize() / 1024)

// Meminfo is what the OOM arithmetic needs from /proc/meminfo, in kB.
type Meminfo struct {
	TotalKB, SwapKB, AvailableKB int64
}

// TotalPages is the kernel's totalpages for a global OOM: RAM and swap.
func (m Meminfo) TotalPages() int64 { return (m.TotalKB + m.SwapKB) / PageKB }

// ReadMeminfo reads /proc/meminfo.
func ReadMeminfo(root string) (Meminfo, error) {
	var m Meminfo
	name := filepath.Join(root, "proc", "meminfo")
	b, err := ReadFile(name, MaxSmall)
	if err != nil {
		return m, err
	}
	m.TotalKB = StatusKB(b, "MemTotal:")
	m.SwapKB = StatusKB(b, "SwapTotal:")
	m.AvailableKB = StatusKB(b, "MemAvailable:")
	if m.TotalKB <= 0 {
		return m, fmt.Errorf("%s has no MemTotal", name)
	}
	return m, nil
}

// Badness is the kernel's oom_badness (mm/oom_kill.c) in pages: what a
// process holds (resident, swapped, page tables) plus its oom_score_adj in
// thousandths of totalpages. The kernel kills the highest first.
func Badness(memKB int64, adj int, totalPages int64) int64 {
	if adj == OOMScoreAdjMin {
		return math.MinInt64
	}
	return memKB/PageKB + int64(adj)*(totalPages/1000)
}

// CounterSlack is how many pages the kernel's own reading of a process's
// memory may be off by on a node of cpus CPUs: since Linux 6.2 the
// counters oom_badness reads are per-CPU (percpu_counter, each CPU
// holding up to max(32, 2×CPUs) pages not yet summed), while /proc sums
// them. Two processes closer than this are a tie to a model.
func CounterSlack(cpus int) int64 {
	cpus = max(cpus, 1)
	return int64(max(32, 2*cpus) * cpus)
}

// Killable reports whether a global OOM may choose p: not a kernel thread,
// not init, not at -1000.
func Killable(p *Process) bool {
	return !p.Kernel && p.OOMScoreAdj > OOMScoreAdjMin && p.Pid != 1
}

// maxRankScan bounds the processes FirstVictim reads.
const maxRankScan = 1 << 16

// FirstVictim is the process a global OOM would kill now by Badness, and
// its badness; skip is left out (the victim just killed, still exiting).
// ok is false when no process is killable. A process's file-backed pages
// do not count: reclaim takes them before the kernel chooses (its kill
// records say file-rss:0kB), and a process faults them back in after, so
// a reading then holds pages the kernel never saw.
func FirstVictim(root string, mode Mode, skip int) (first Process, badness int64, ok bool, err error) {
	mem, err := ReadMeminfo(root)
	if err != nil {
		return first, 0, false, err
	}
	pids, err := ListPids(root)
	if err != nil {
		return first, 0, false, err
	}
	total := mem.TotalPages()
	r := NewProcReader(root, mode)
	for _, pid := range pids[:min(len(pids), maxRankScan)] {
		if pid == skip {
			continue
		}
		p, err := r.Read(pid)
		if err != nil || !Killable(&p) {
			continue
		}
		if b := Badness(p.MemKB-p.FileKB, p.OOMScoreAdj, total); !ok || b > badness {
			first, badness, ok = p, b, true
		}
	}
	return first, badness, ok, nil
}

// NodeOOMKills is how many processes the OOM killer killed on the node
// since boot (/proc/vmstat's oom_kill), whatever their cgroup.
func NodeOOMKills(root string) (uint64, error) {
	p := filepath.Join(root, "proc", "vmstat")
	b, err := ReadFile(p, MaxSmall)
	if err != nil {
		return 0, err
	}
	n, ok := KeyValue(b, "oom_kill")
	if !ok {
		return 0, &ParseError{Path: p, Err: errors.New("no oom_kill")}
	}
	return n, nil
}
