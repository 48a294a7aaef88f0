package kernel

import (
	"path/filepath"
	"strconv"
)

// Parent is the process's parent, from /proc/PID/stat.
func Parent(root string, pid int) (int, error) {
	p := filepath.Join(root, "proc", strconv.Itoa(pid), "stat")
	b, err := ReadFile(p, MaxSmall)
	if err != nil {
		return 0, err
	}
	_, ppid, _, err := parseStat(b)
	if err != nil {
		return 0, &ParseError{Path: p, Err: err}
	}
	return ppid, nil
}
