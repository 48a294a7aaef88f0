package kernel

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// Meminfo is what the OOM arithmetic needs from /proc/meminfo, in kB.
type Meminfo struct {
	TotalKB, SwapKB, AvailableKB int64
}

// TotalPages is the kernel's totalpages for a global OOM: RAM and swap.
func (m Meminfo) TotalPages() int64 { return (m.TotalKB + m.SwapKB) / PageKB }

// PageKB is the page size in kB.
var PageKB = int64(os.Getpagesize() / 1024)

// ReadMeminfo reads /proc/meminfo.
func ReadMeminfo(root string) (Meminfo, error) {
	var m Meminfo
	b, err := readFile(filepath.Join(root, "proc", "meminfo"), 64<<10)
	if err != nil {
		return m, err
	}
	m.TotalKB = statusKB(b, "MemTotal:")
	m.SwapKB = statusKB(b, "SwapTotal:")
	m.AvailableKB = statusKB(b, "MemAvailable:")
	if m.TotalKB <= 0 {
		return m, fmt.Errorf("%s has no MemTotal", filepath.Join(root, "proc", "meminfo"))
	}
	return m, nil
}

// statusKB is the kB value of a "Key:   N kB" line, 0 when absent.
func statusKB(b []byte, key string) int64 {
	i := bytes.Index(b, []byte(key))
	if i < 0 || (i > 0 && b[i-1] != '\n') {
		return 0
	}
	line := b[i+len(key):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	v, ok := parseInt(bytes.TrimSuffix(bytes.TrimSpace(line), []byte(" kB")))
	if !ok || v < 0 {
		return 0
	}
	return int64(v)
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

// OOMScore is /proc/PID/oom_score for a badness (fs/proc/base.c): scaled
// into 0..2000, then by 2/3.
func OOMScore(badness, totalPages int64) int {
	if badness == math.MinInt64 || totalPages <= 0 {
		return 0
	}
	return int(max(0, (1000+badness*1000/totalPages)*2/3))
}

// MemoryHeadroom is how much more the cgroup cg may take before a limit of
// its own or of an ancestor stops it, and which cgroup's limit that is;
// limited is false when none has one.
func MemoryHeadroom(root string, mode Mode, cg string) (headroom int64, by string, limited bool, err error) {
	curName := "memory.current"
	if mode != ModeV2 {
		curName = "memory.usage_in_bytes"
	}
	headroom = math.MaxInt64
	for dir := filepath.Clean("/" + cg); ; dir = filepath.Dir(dir) {
		if l, ok := MemoryLimit(root, mode, dir); ok {
			p := filepath.Join(MemoryCgroupDir(root, mode, dir), curName)
			cur, err := readFile(p, maxSmall)
			u, uok := parseLimit(cur)
			if err != nil || !uok {
				return 0, "", false, fmt.Errorf("read %s: %v", p, err)
			}
			if h := max(0, l-u); h < headroom {
				headroom, by, limited = h, dir, true
			}
		}
		if dir == "/" {
			return headroom, by, limited, nil
		}
	}
}

// MemoryLimit is cgroup cg's own memory limit in bytes; false when it has none.
func MemoryLimit(root string, mode Mode, cg string) (int64, bool) {
	name := "memory.max"
	if mode != ModeV2 {
		name = "memory.limit_in_bytes"
	}
	b, err := readFile(filepath.Join(MemoryCgroupDir(root, mode, cg), name), maxSmall)
	if err != nil {
		return 0, false
	}
	v, ok := parseLimit(b)
	return v, ok && v < math.MaxInt64/2
}

// parseLimit reads a cgroup memory value; "max" is unlimited.
func parseLimit(b []byte) (int64, bool) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return math.MaxInt64, true
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	return v, err == nil && v >= 0
}
