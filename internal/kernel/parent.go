package kernel

import (
	"path/filepath"
	"strconv"
)

// Parent is the process's parent, and whether the process has exited or
// is exiting (a zombie not reaped yet, or one between leaving its cgroup
// and becoming one: its /proc shows the root cgroup, not the one it ran in).
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
	flags, _ := ParseInt(f[6])
	exited = len(f[0]) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X') || flags&pfExiting != 0
	return ppid, exited, nil
}

// pfExiting is the kernel's PF_EXITING, set when a task starts to exit.
const pfExiting = 0x4
