package kernel

import (
	"path/filepath"
	"strconv"
)

// Parent is the process's parent, and whether the process has exited (a
// zombie, not reaped yet: its /proc shows the root cgroup, not the one it
// ran in).
func Parent(root string, pid int) (ppid int, exited bool, err error) {
	p := filepath.Join(root, "proc", strconv.Itoa(pid), "stat")
	b, err := ReadFile(p, MaxSmall)
	if err != nil {
		return 0, false, err
	}
	_, rest, err := statComm(b)
	if err != nil {
		return 0, false, &ParseError{Path: p, Err: err}
	}
	f := statFields(rest)
	if f[1] == nil {
		return 0, false, &ParseError{Path: p, Err: errNoPPid}
	}
	ppid, _ = ParseInt(f[1])
	exited = len(f[0]) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X')
	return ppid, exited, nil
}
