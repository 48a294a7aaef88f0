package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Range of /proc/PID/oom_score_adj.
const (
	OOMScoreAdjMin = -1000
	OOMScoreAdjMax = 1000
)

// ReadOOMScoreAdj returns /proc/PID/oom_score_adj.
func ReadOOMScoreAdj(root string, pid int) (int, error) {
	return ReadInt(filepath.Join(root, "proc", strconv.Itoa(pid), "oom_score_adj"))
}

// ListPids returns the numeric entries of /proc.
func ListPids(root string) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(root, "proc"))
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// SameProcess tells whether tid is one of the threads of process pid;
// known is false where it cannot tell: both gone, or the thread gone from
// a process still there.
func SameProcess(root string, pid, tid int) (same, known bool) {
	proc := filepath.Join(root, "proc")
	if _, err := os.Lstat(filepath.Join(proc, strconv.Itoa(pid), "task", strconv.Itoa(tid))); err == nil {
		return true, true
	}
	// A process's leader is not released while one of its threads runs.
	if _, err := os.Lstat(filepath.Join(proc, strconv.Itoa(tid))); err == nil {
		return false, true
	}
	return false, false
}

// TaskComm is name as the kernel keeps it for a task (comm, OOM reports):
// cut to TASK_COMM_LEN-1 = 15 bytes.
func TaskComm(name string) string { return name[:min(len(name), 15)] }

// ProcDir is one process's /proc/PID, held open: every later read or write
// through it reaches that process or fails with ESRCH, never a process that
// got the pid after it exited.
type ProcDir struct {
	fd       int
	pid      int
	path     string // with a trailing '/'
	truncate bool   // not the kernel's procfs: a tree's
}

// OpenProc opens /proc/PID under root.
func OpenProc(root string, pid int) (*ProcDir, error) {
	p := filepath.Join(root, "proc", strconv.Itoa(pid))
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return &ProcDir{fd: fd, pid: pid, path: p + "/", truncate: !kernelFS(filepath.Join(root, "proc"))}, nil
}

// Close releases the directory.
func (d *ProcDir) Close() error { return syscall.Close(d.fd) }

// Cgroup is the process's cgroup in the memory controller's hierarchy, as
// the reader's cgroup namespace shows it.
func (d *ProcDir) Cgroup(mode Mode) (string, error) {
	b, err := readAt(d.fd, d.path, "cgroup", MaxSmall)
	if err != nil {
		return "", err
	}
	cg, err := CgroupPath(b, mode)
	if err != nil {
		return "", &ParseError{Path: d.path + "cgroup", Err: err}
	}
	return cg, nil
}

// OOMScoreAdj reads the process's oom_score_adj.
func (d *ProcDir) OOMScoreAdj() (int, error) {
	b, err := readAt(d.fd, d.path, "oom_score_adj", MaxSmall)
	if err != nil {
		return 0, err
	}
	v, ok := ParseInt(b)
	if !ok {
		return 0, &ParseError{Path: d.path + "oom_score_adj", Err: fmt.Errorf("%q is not a number", b)}
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
	return writeAt(d.fd, d.path, "oom_score_adj", []byte(strconv.Itoa(v)+"\n"), d.truncate)
}

// WriteScore sets pid's oom_score_adj by its path.
func WriteScore(root string, pid, v int) error {
	if v < OOMScoreAdjMin || v > OOMScoreAdjMax {
		return fmt.Errorf("oom_score_adj %d is outside %d..%d", v, OOMScoreAdjMin, OOMScoreAdjMax)
	}
	return WriteFile(filepath.Join(root, "proc"), filepath.Join(root, "proc", strconv.Itoa(pid), "oom_score_adj"), []byte(strconv.Itoa(v)+"\n"))
}

// Start is when the process started, in clock ticks after boot
// (/proc/PID/stat's starttime): with the pid, what names it across reuse.
func (d *ProcDir) Start() (uint64, error) {
	b, err := readAt(d.fd, d.path, "stat", MaxSmall)
	if err != nil {
		return 0, err
	}
	_, start, err := parseStart(b)
	if err != nil {
		return 0, &ParseError{Path: d.path + "stat", Err: err}
	}
	return start, nil
}
