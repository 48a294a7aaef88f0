package kernel

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ProcDir is one process's /proc/PID, held open: every later read or write
// through it reaches that process or fails with ESRCH, never a process that
// got the pid after it exited.
type ProcDir struct {
	fd   int
	pid  int
	path string
}

// OpenProc opens /proc/PID under root.
func OpenProc(root string, pid int) (*ProcDir, error) {
	p := procPath(root, pid, "")
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return &ProcDir{fd: fd, pid: pid, path: p + "/"}, nil
}

// Close releases the directory.
func (d *ProcDir) Close() error { return syscall.Close(d.fd) }

// read reads a file of the process, up to 64 KiB, without blocking.
func (d *ProcDir) read(name string) ([]byte, error) {
	fd, err := syscall.Openat(d.fd, name, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.path + name, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 64<<10)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: d.path + name, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
	return nil, &os.PathError{Op: "read", Path: d.path + name, Err: errors.New("over 64 KiB")}
}

// Cgroup is the process's cgroup in the memory controller's hierarchy, as
// the reader's cgroup namespace shows it.
func (d *ProcDir) Cgroup(mode Mode) (string, error) {
	b, err := d.read("cgroup")
	if err != nil {
		return "", err
	}
	cg, err := cgroupLineBytes(b, mode)
	if err != nil {
		return "", fmt.Errorf("%scgroup: %w", d.path, err)
	}
	return cg, nil
}

// OOMScoreAdj reads the process's oom_score_adj.
func (d *ProcDir) OOMScoreAdj() (int, error) {
	b, err := d.read("oom_score_adj")
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, &ParseError{Path: d.path + "oom_score_adj", Err: err}
	}
	return v, nil
}

// SetOOMScoreAdj writes the process's oom_score_adj. A writer with
// CAP_SYS_RESOURCE also moves the process's floor (oom_score_adj_min) there,
// below which the process cannot set itself again.
func (d *ProcDir) SetOOMScoreAdj(v int) error {
	if v < OOMScoreAdjMin || v > OOMScoreAdjMax {
		return fmt.Errorf("oom_score_adj %d is outside %d..%d", v, OOMScoreAdjMin, OOMScoreAdjMax)
	}
	fd, err := syscall.Openat(d.fd, "oom_score_adj", syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.path + "oom_score_adj", Err: err}
	}
	_, werr := syscall.Write(fd, []byte(strconv.Itoa(v)+"\n"))
	cerr := syscall.Close(fd)
	if werr != nil {
		return &os.PathError{Op: "write", Path: d.path + "oom_score_adj", Err: werr}
	}
	if cerr != nil {
		return &os.PathError{Op: "close", Path: d.path + "oom_score_adj", Err: cerr}
	}
	return nil
}

// ParseError is a kernel file whose content is not what the kernel writes.
type ParseError struct {
	Path string
	Err  error
}

func (e *ParseError) Error() string { return "parse " + e.Path + ": " + e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// CgroupNSDepth is how deep the reader's cgroup namespace is below the
// hierarchy's root, as pid 1 (in the root cgroup or init.scope) shows it:
// "/../../init.scope" from two levels down. 0 in the host's namespace, or
// when pid 1 cannot be read.
func CgroupNSDepth(root string, mode Mode) int {
	cg, err := ProcCgroup(root, mode, 1)
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range strings.Split(strings.TrimPrefix(cg, "/"), "/") {
		if c != ".." {
			break
		}
		n++
	}
	return n
}
