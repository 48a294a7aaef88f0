package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// The fast process reader, the one exception to file.go: a node has tens of
// thousands of processes, and the doctor reads five files of each, so it
// reuses one buffer and one path and opens with a raw openat.

// Process is what /proc says about one process.
type Process struct {
	Pid, PPid   int
	Comm        string
	Cmdline     []string
	OOMScore    int // from the kernel's formula over MemKB, as /proc/PID/oom_score shows it
	OOMScoreAdj int
	// MemKB is what the OOM killer counts a process for: resident, swapped
	// and page tables (VmRSS + VmSwap + VmPTE), in kB.
	MemKB int64
	// FileKB is the file-backed part of the resident memory (RssFile).
	FileKB int64
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
	limit := MaxSmall
	if name == "cmdline" {
		limit = MaxCmdline
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
	v, ok := ParseInt(b)
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
	p.MemKB = StatusKB(status, "VmRSS:") + StatusKB(status, "VmSwap:") + StatusKB(status, "VmPTE:")
	p.FileKB = StatusKB(status, "RssFile:")
	if p.OOMScoreAdj, err = r.int(pid, "oom_score_adj"); err != nil {
		return p, err
	}
	if cg, err := r.file(pid, "cgroup"); err == nil {
		p.Cgroup, _ = CgroupPath(cg, r.mode)
	}
	return p, nil
}

var errNoPPid = errors.New("no ppid")

// parseStat reads comm, ppid and whether the task is a kernel thread from
// /proc/PID/stat: "pid (comm) state ppid pgrp session tty tpgid flags …",
// where comm may hold spaces and parentheses.
func parseStat(stat []byte) (comm string, ppid int, kthread bool, err error) {
	comm, rest, err := statComm(stat)
	if err != nil {
		return "", 0, false, err
	}
	fields := statFields(rest)
	if fields[1] == nil {
		return "", 0, false, errNoPPid
	}
	ppid, _ = ParseInt(fields[1])
	if flags, ok := ParseInt(fields[6]); ok {
		kthread = flags&0x00200000 != 0 // PF_KTHREAD
	}
	return comm, ppid, kthread, nil
}

// statComm splits /proc/PID/stat at its comm, which may hold spaces and
// parentheses: the last ')' ends it.
func statComm(stat []byte) (comm string, rest []byte, err error) {
	open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return "", nil, errors.New("no (comm)")
	}
	return string(stat[open+1 : closing]), stat[closing+1:], nil
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
