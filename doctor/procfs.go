package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"
)

// What only the doctor reads of /proc and /sys, through the kernel
// package's bounded, non-blocking reads, and the OOM killer's arithmetic.

// readParsed reads the file p (up to limit bytes) and parses it.
func readParsed[T any](p string, limit int64, parse func([]byte) (T, error)) (T, error) {
	b, err := kernel.ReadFile(p, limit)
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(b)
}

// cmdlineParams parses /proc/cmdline into its parameters, in order; a
// parameter may repeat (console= often does).
func cmdlineParams(root string) ([][2]string, error) {
	return readParsed(filepath.Join(root, "proc", "cmdline"), kernel.MaxSmall, parseCmdlineParams)
}

func parseCmdlineParams(b []byte) ([][2]string, error) {
	var out [][2]string
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// console is one line of /proc/consoles.
type console struct {
	Name    string // ttyS0, tty0, hvc0
	Enabled bool   // E flag
	Flags   string
}

// readConsoles reads /proc/consoles.
func readConsoles(root string) ([]console, error) {
	return readParsed(filepath.Join(root, "proc", "consoles"), kernel.MaxSmall, parseConsoles)
}

func parseConsoles(b []byte) ([]console, error) {
	var out []console
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		c := console{Name: fields[0]}
		if i, j := strings.IndexByte(line, '('), strings.IndexByte(line, ')'); i >= 0 && j > i {
			c.Flags = line[i+1 : j]
			c.Enabled = strings.Contains(c.Flags, "E")
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

// cpuTimes is one cpu line of /proc/stat, in clock ticks.
type cpuTimes struct {
	CPU                                                   int // -1 for the aggregate line
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Total is the sum of every field.
func (c cpuTimes) Total() uint64 {
	return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
}

// readCPUTimes parses a /proc/stat-format file under root (proc/stat normally).
func readCPUTimes(root, file string) ([]cpuTimes, error) {
	return readParsed(filepath.Join(root, file), kernel.MaxTable, parseCPUTimes)
}

func parseCPUTimes(b []byte) ([]cpuTimes, error) {
	var out []cpuTimes
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		c := cpuTimes{CPU: -1}
		if fields[0] != "cpu" {
			n, err := strconv.Atoi(fields[0][3:])
			if err != nil || n < 0 || n >= maxCPUs {
				continue
			}
			c.CPU = n
		}
		v := make([]uint64, 8)
		for i := range v {
			v[i], _ = strconv.ParseUint(fields[i+1], 10, 64)
		}
		c.User, c.Nice, c.System, c.Idle, c.IOWait, c.IRQ, c.SoftIRQ, c.Steal = v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		out = append(out, c)
	}
	return out, sc.Err()
}

// interrupt is one numbered line of /proc/interrupts.
type interrupt struct {
	IRQ    int
	Counts []uint64 // per CPU
	Name   string   // the last field: the device, e.g. "ena-Tx-Rx-3"
	Chip   string   // the rest, e.g. "PCI-MSI 2097153-edge"
}

// readInterrupts reads /proc/interrupts.
func readInterrupts(root string) ([]interrupt, error) {
	return readParsed(filepath.Join(root, "proc", "interrupts"), kernel.MaxTable, parseInterrupts)
}

func parseInterrupts(b []byte) ([]interrupt, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ncpu := 0
	var out []interrupt
	for sc.Scan() {
		line := sc.Text()
		if ncpu == 0 {
			ncpu = min(len(strings.Fields(line)), maxCPUs)
			continue
		}
		label, rest, ok := strings.Cut(line, ":")
		irq, err := strconv.Atoi(strings.TrimSpace(label))
		if !ok || err != nil {
			continue
		}
		fields := strings.Fields(rest)
		in := interrupt{IRQ: irq}
		i := 0
		for ; i < len(fields) && i < ncpu; i++ {
			n, err := strconv.ParseUint(fields[i], 10, 64)
			if err != nil {
				break
			}
			in.Counts = append(in.Counts, n)
		}
		if i < len(fields) {
			in.Name = fields[len(fields)-1]
			in.Chip = strings.Join(fields[i:len(fields)-1], " ")
		}
		out = append(out, in)
	}
	return out, sc.Err()
}

// irqAffinity returns the CPUs an interrupt is delivered to:
// effective_affinity_list when the kernel has it, else smp_affinity_list.
// CPUs are below ncpu, the CPUs the node has.
func irqAffinity(root string, irq, ncpu int) ([]int, error) {
	dir := filepath.Join(root, "proc", "irq", strconv.Itoa(irq))
	b, err := kernel.ReadFile(filepath.Join(dir, "effective_affinity_list"), kernel.MaxSmall)
	if err != nil || strings.TrimSpace(string(b)) == "" {
		if b, err = kernel.ReadFile(filepath.Join(dir, "smp_affinity_list"), kernel.MaxSmall); err != nil {
			return nil, err
		}
	}
	return parseCPUList(strings.TrimSpace(string(b)), ncpu)
}

// maxCPUs is the most CPUs a Linux kernel supports (NR_CPUS at most).
const maxCPUs = 8192

// parseCPUList parses "0-3,8,10-11", each CPU below ncpu (maxCPUs when ncpu
// is 0), so that no list can ask for more than the CPUs there are.
func parseCPUList(s string, ncpu int) ([]int, error) {
	if ncpu <= 0 || ncpu > maxCPUs {
		ncpu = maxCPUs
	}
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, &kernel.ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("bad CPU %q", lo)}
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, &kernel.ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("bad range %q", part)}
			}
		}
		if b >= ncpu {
			return nil, &kernel.ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("CPU %d, but the node has %d", b, ncpu)}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
		if len(out) > ncpu {
			return nil, &kernel.ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("more than the node's %d CPUs", ncpu)}
		}
	}
	return out, nil
}

// dyingMemcgs counts memory cgroups that were removed but are still held by
// the kernel: nr_dying_descendants of the root cgroup.stat on v2; on v1,
// /proc/cgroups' count for memory less the cgroups still in the tree.
func dyingMemcgs(root string, mode kernel.Mode) (int, error) {
	if mode == kernel.ModeV2 {
		b, err := kernel.ReadFile(filepath.Join(root, kernel.CgroupMount, "cgroup.stat"), kernel.MaxSmall)
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == "nr_dying_descendants" {
				return strconv.Atoi(strings.TrimSpace(v))
			}
		}
		return 0, fmt.Errorf("no nr_dying_descendants in cgroup.stat")
	}
	b, err := kernel.ReadFile(filepath.Join(root, "proc", "cgroups"), kernel.MaxSmall)
	if err != nil {
		return 0, err
	}
	total := -1
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "memory" {
			total, _ = strconv.Atoi(f[2])
		}
	}
	if total < 0 {
		return 0, fmt.Errorf("no memory controller in /proc/cgroups")
	}
	live := 0
	err = filepath.WalkDir(filepath.Join(root, kernel.CgroupMount, "memory"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			live++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return max(total-live, 0), nil
}

// oomScore is /proc/PID/oom_score for a badness (fs/proc/base.c): scaled
// into 0..2000, then by 2/3.
func oomScore(badness, totalPages int64) int {
	if badness == math.MinInt64 || totalPages <= 0 {
		return 0
	}
	return int(max(0, (1000+badness*1000/totalPages)*2/3))
}
