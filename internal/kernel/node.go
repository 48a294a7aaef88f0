package kernel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Process is what /proc says about one process.
type Process struct {
	Pid, PPid   int
	Comm        string
	Cmdline     []string
	OOMScore    int // from the kernel's formula over MemKB, as /proc/PID/oom_score shows it
	OOMScoreAdj int
	// MemKB is what the OOM killer counts a process for: resident, swapped
	// and page tables (VmRSS + VmSwap + VmPTE), in kB.
	MemKB  int64
	Cgroup string // in the memory controller's hierarchy; "" when unknown
	Kernel bool   // a kernel thread: no mm, never an OOM victim
}

// ProcReader reads processes with one reusable buffer and three system
// calls a file: a node has tens of thousands of processes.
type ProcReader struct {
	root string
	mode Mode
	buf  []byte
	path []byte // NUL-terminated, reused
}

// NewProcReader makes a reader; use one per goroutine.
func NewProcReader(root string, mode Mode) *ProcReader {
	return &ProcReader{root: root, mode: mode, buf: make([]byte, 4096)}
}

func (r *ProcReader) file(pid int, name string) ([]byte, error) {
	r.path = append(append(r.path[:0], r.root...), "/proc/"...)
	r.path = append(append(append(strconv.AppendInt(r.path, int64(pid), 10), '/'), name...), 0)
	p := func() string { return string(r.path[:len(r.path)-1]) }
	fd, err := openat(r.path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p(), Err: err}
	}
	defer syscall.Close(fd)
	limit := maxSmall
	if name == "cmdline" {
		limit = maxCmdline
	}
	n := 0
	for {
		m, err := syscall.Read(fd, r.buf[n:])
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: p(), Err: err}
		}
		if m == 0 {
			return r.buf[:n], nil
		}
		n += m
		if n >= limit {
			// A command line longer than this is cut, not dropped: the
			// process still counts. Anything else that long is not the kernel's.
			if name == "cmdline" {
				return r.buf[:limit], nil
			}
			return nil, &os.PathError{Op: "read", Path: p(), Err: fmt.Errorf("over %d bytes", limit)}
		}
		if n == len(r.buf) {
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
	}
}

func (r *ProcReader) int(pid int, name string) (int, error) {
	b, err := r.file(pid, name)
	if err != nil {
		return 0, err
	}
	v, ok := parseInt(b)
	if !ok {
		return 0, fmt.Errorf("parse /proc/%d/%s: %q is not a number", pid, name, b)
	}
	return v, nil
}

// openat opens the NUL-terminated path read-only: syscall.Open would copy
// the path into a new allocation for each of a node's 100,000 files.
func openat(path []byte) (int, error) {
	dirfd := -100 // AT_FDCWD
	fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&path[0])),
		uintptr(syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// Read reads one process; it fails when the process is gone. It allocates
// only what it keeps: a node has tens of thousands of processes.
func (r *ProcReader) Read(pid int) (Process, error) {
	p := Process{Pid: pid}
	stat, err := r.file(pid, "stat")
	if err != nil {
		return p, err
	}
	if p.Comm, p.PPid, p.Kernel, err = parseStat(stat); err != nil {
		return p, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	cmd, err := r.file(pid, "cmdline")
	if err != nil {
		return p, err
	}
	if c := strings.TrimRight(string(cmd), "\x00"); c != "" {
		p.Cmdline = strings.Split(c, "\x00")
	}
	status, err := r.file(pid, "status")
	if err != nil {
		return p, err
	}
	p.MemKB = statusKB(status, "VmRSS:") + statusKB(status, "VmSwap:") + statusKB(status, "VmPTE:")
	if p.OOMScoreAdj, err = r.int(pid, "oom_score_adj"); err != nil {
		return p, err
	}
	if cg, err := r.file(pid, "cgroup"); err == nil {
		p.Cgroup, _ = cgroupLineBytes(cg, r.mode)
	}
	return p, nil
}

// parseStat reads comm, ppid and whether the task is a kernel thread from
// /proc/PID/stat: "pid (comm) state ppid pgrp session tty tpgid flags …",
// where comm may hold spaces and parentheses.
func parseStat(stat []byte) (comm string, ppid int, kthread bool, err error) {
	open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return "", 0, false, errors.New("no (comm)")
	}
	fields := statFields(stat[closing+1:])
	if fields[1] == nil {
		return "", 0, false, errors.New("no ppid")
	}
	ppid, _ = parseInt(fields[1])
	if flags, ok := parseInt(fields[6]); ok {
		kthread = flags&0x00200000 != 0 // PF_KTHREAD
	}
	return string(stat[open+1 : closing]), ppid, kthread, nil
}

// statFields returns the first seven space-separated fields after comm:
// state, ppid, pgrp, session, tty_nr, tpgid, flags; nil where missing.
func statFields(b []byte) (f [7][]byte) {
	for i := range f {
		b = bytes.TrimLeft(b, " ")
		if len(b) == 0 {
			return f
		}
		end := bytes.IndexByte(b, ' ')
		if end < 0 {
			end = len(b)
		}
		f[i], b = bytes.TrimRight(b[:end], "\n"), b[end:]
	}
	return f
}

// parseInt parses a decimal integer surrounded by white space, without
// allocating.
func parseInt(b []byte) (int, bool) {
	b = bytes.TrimSpace(b)
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// ReadSysctl returns /proc/sys/NAME (dots or slashes) trimmed.
func ReadSysctl(root, name string) (string, error) {
	b, err := readFile(filepath.Join(root, "proc", "sys", strings.ReplaceAll(name, ".", "/")), maxSmall)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// CmdlineParams parses /proc/cmdline into its parameters, in order; a
// parameter may repeat (console= often does).
func CmdlineParams(root string) ([][2]string, error) {
	b, err := readFile(filepath.Join(root, "proc", "cmdline"), maxSmall)
	if err != nil {
		return nil, err
	}
	return parseCmdlineParams(b)
}

func parseCmdlineParams(b []byte) ([][2]string, error) {
	var out [][2]string
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// Console is one line of /proc/consoles.
type Console struct {
	Name    string // ttyS0, tty0, hvc0
	Enabled bool   // E flag
	Flags   string
}

// Consoles reads /proc/consoles.
func Consoles(root string) ([]Console, error) {
	b, err := readFile(filepath.Join(root, "proc", "consoles"), maxSmall)
	if err != nil {
		return nil, err
	}
	return parseConsoles(b)
}

func parseConsoles(b []byte) ([]Console, error) {
	var out []Console
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		c := Console{Name: fields[0]}
		if i, j := strings.IndexByte(line, '('), strings.IndexByte(line, ')'); i >= 0 && j > i {
			c.Flags = line[i+1 : j]
			c.Enabled = strings.Contains(c.Flags, "E")
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

// CPUTimes is one cpu line of /proc/stat, in clock ticks.
type CPUTimes struct {
	CPU                                                   int // -1 for the aggregate line
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Total is the sum of every field.
func (c CPUTimes) Total() uint64 {
	return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
}

// ReadCPUTimes parses a /proc/stat-format file under root (proc/stat normally).
func ReadCPUTimes(root, file string) ([]CPUTimes, error) {
	b, err := readFile(filepath.Join(root, file), maxTable)
	if err != nil {
		return nil, err
	}
	return parseCPUTimes(b)
}

func parseCPUTimes(b []byte) ([]CPUTimes, error) {
	var out []CPUTimes
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		c := CPUTimes{CPU: -1}
		if fields[0] != "cpu" {
			n, err := strconv.Atoi(fields[0][3:])
			if err != nil || n < 0 || n >= MaxCPUs {
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

// Interrupt is one numbered line of /proc/interrupts.
type Interrupt struct {
	IRQ    int
	Counts []uint64 // per CPU
	Name   string   // the last field: the device, e.g. "ena-Tx-Rx-3"
	Chip   string   // the rest, e.g. "PCI-MSI 2097153-edge"
}

// Interrupts reads /proc/interrupts.
func Interrupts(root string) ([]Interrupt, error) {
	b, err := readFile(filepath.Join(root, "proc", "interrupts"), maxTable)
	if err != nil {
		return nil, err
	}
	return parseInterrupts(b)
}

func parseInterrupts(b []byte) ([]Interrupt, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ncpu := 0
	var out []Interrupt
	for sc.Scan() {
		line := sc.Text()
		if ncpu == 0 {
			ncpu = min(len(strings.Fields(line)), MaxCPUs)
			continue
		}
		label, rest, ok := strings.Cut(line, ":")
		irq, err := strconv.Atoi(strings.TrimSpace(label))
		if !ok || err != nil {
			continue
		}
		fields := strings.Fields(rest)
		in := Interrupt{IRQ: irq}
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

// IRQAffinity returns the CPUs an interrupt is delivered to:
// effective_affinity_list when the kernel has it, else smp_affinity_list.
// CPUs are below ncpu, the CPUs the node has.
func IRQAffinity(root string, irq, ncpu int) ([]int, error) {
	dir := filepath.Join(root, "proc", "irq", strconv.Itoa(irq))
	b, err := readFile(filepath.Join(dir, "effective_affinity_list"), maxSmall)
	if err != nil || strings.TrimSpace(string(b)) == "" {
		if b, err = readFile(filepath.Join(dir, "smp_affinity_list"), maxSmall); err != nil {
			return nil, err
		}
	}
	return ParseCPUList(strings.TrimSpace(string(b)), ncpu)
}

// MaxCPUs is the most CPUs a Linux kernel supports (NR_CPUS at most).
const MaxCPUs = 8192

// ParseCPUList parses "0-3,8,10-11", each CPU below ncpu (MaxCPUs when ncpu
// is 0), so that no list can ask for more than the CPUs there are.
func ParseCPUList(s string, ncpu int) ([]int, error) {
	if ncpu <= 0 || ncpu > MaxCPUs {
		ncpu = MaxCPUs
	}
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, &ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("bad CPU %q", lo)}
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, &ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("bad range %q", part)}
			}
		}
		if b >= ncpu {
			return nil, &ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("CPU %d, but the node has %d", b, ncpu)}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
		if len(out) > ncpu {
			return nil, &ParseError{Path: "cpu list " + strconv.Quote(s), Err: fmt.Errorf("more than the node's %d CPUs", ncpu)}
		}
	}
	return out, nil
}

// DyingMemcgs counts memory cgroups that were removed but are still held by
// the kernel: nr_dying_descendants of the root cgroup.stat on v2; on v1,
// /proc/cgroups' count for memory less the cgroups still in the tree.
func DyingMemcgs(root string, mode Mode) (int, error) {
	if mode == ModeV2 {
		b, err := readFile(filepath.Join(root, CgroupMount, "cgroup.stat"), maxSmall)
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
	b, err := readFile(filepath.Join(root, "proc", "cgroups"), maxSmall)
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
	err = filepath.WalkDir(filepath.Join(root, CgroupMount, "memory"), func(_ string, d os.DirEntry, err error) error {
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
