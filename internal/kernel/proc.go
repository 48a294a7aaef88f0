// Package kernel reads and writes the kernel interfaces oomguard works with:
// procfs and cgroupfs on cgroup v1, v2 and hybrid hosts. Every function takes
// the filesystem root ("/" on a node) so tests run the same code on a tree.
package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/oomguard/oomguard/internal/safeio"
)

// Range of /proc/PID/oom_score_adj.
const (
	OOMScoreAdjMin = -1000
	OOMScoreAdjMax = 1000
)

func procPath(root string, pid int, name string) string {
	return filepath.Join(root, "proc", strconv.Itoa(pid), name)
}

// ReadOOMScoreAdj returns /proc/PID/oom_score_adj.
func ReadOOMScoreAdj(root string, pid int) (int, error) {
	return readIntFile(procPath(root, pid, "oom_score_adj"))
}

// ReadOOMScore returns /proc/PID/oom_score, the kernel's current badness.
func ReadOOMScore(root string, pid int) (int, error) {
	return readIntFile(procPath(root, pid, "oom_score"))
}

// WriteOOMScoreAdj sets /proc/PID/oom_score_adj. Lowering it below the
// process's own minimum needs CAP_SYS_RESOURCE; the kernel's EACCES is returned.
func WriteOOMScoreAdj(root string, pid, value int) error {
	if value < OOMScoreAdjMin || value > OOMScoreAdjMax {
		return fmt.Errorf("oom_score_adj %d is outside %d..%d", value, OOMScoreAdjMin, OOMScoreAdjMax)
	}
	p := procPath(root, pid, "oom_score_adj")
	// O_WRONLY without O_CREATE: a vanished process must not leave a file behind in a test tree.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	_, werr := f.WriteString(strconv.Itoa(value) + "\n")
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %d to %s: %w", value, p, werr)
	}
	if cerr != nil {
		return fmt.Errorf("close %s: %w", p, cerr)
	}
	return nil
}

// Cmdline returns /proc/PID/cmdline split at NULs.
func Cmdline(root string, pid int) ([]string, error) {
	b, err := readFile(procPath(root, pid, "cmdline"), maxCmdline)
	if err != nil {
		return nil, err
	}
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\x00"), nil
}

// TaskComm is name as the kernel keeps it for a task (comm, OOM reports):
// cut to TASK_COMM_LEN-1 = 15 bytes.
func TaskComm(name string) string { return name[:min(len(name), 15)] }

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

// Bounds on what is read from /proc and /sys: a file there is small, unless
// a captured tree made it otherwise.
const (
	maxSmall   = 64 << 10 // a number, a cgroup path, a stat line, a sysctl
	maxCmdline = 256 << 10
	maxTable   = 16 << 20 // /proc/interrupts, /proc/stat, cgroup.procs on a large node
)

// readFile reads a kernel file, up to limit bytes, never waiting on it: a
// captured tree may hold a FIFO or a link to a device anywhere.
func readFile(p string, limit int64) ([]byte, error) { return safeio.ReadFile(p, limit) }

func readIntFile(p string) (int, error) {
	b, err := readFile(p, maxSmall)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, &ParseError{Path: p, Err: err}
	}
	return v, nil
}

// IsGone reports whether err means the process or cgroup no longer exists:
// ENODEV is what a cgroup file says once its cgroup is being removed.
func IsGone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENODEV)
}
