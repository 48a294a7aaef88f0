// Package enforce applies a decision to the kernel: a container's processes'
// oom_score_adj and its cgroup's memory.oom.group. Each function reads first
// and writes only what differs, and says what it found, so the hook, the
// plugin's create, start, Synchronize and verify paths all change and report
// a container the same way.
package enforce

import (
	"fmt"

	"github.com/oomguard/oomguard/internal/kernel"
)

// Score sets pid's oom_score_adj to want unless it already has it, and
// returns the value it found.
func Score(root string, pid, want int) (old int, changed bool, err error) {
	old, err = kernel.ReadOOMScoreAdj(root, pid)
	if err != nil {
		return 0, false, fmt.Errorf("read oom_score_adj of pid %d: %w", pid, err)
	}
	if old == want {
		return old, false, nil
	}
	if err := kernel.WriteOOMScoreAdj(root, pid, want); err != nil {
		return old, false, fmt.Errorf("set oom_score_adj of pid %d: %w", pid, err)
	}
	return old, true, nil
}

// Scores sets every process in cgroup cg and below it to want, and returns
// how many it changed. Processes that exit meanwhile are not errors.
func Scores(root string, mode kernel.Mode, cg string, want int) (changed int, errs []error) {
	pids, err := kernel.CgroupPids(root, mode, cg)
	if err != nil {
		if kernel.IsGone(err) {
			return 0, nil
		}
		return 0, []error{err}
	}
	for _, pid := range pids {
		_, ok, err := Score(root, pid, want)
		if err != nil && !kernel.IsGone(err) {
			errs = append(errs, err)
		}
		if ok {
			changed++
		}
	}
	return changed, errs
}

// Group sets memory.oom.group of cgroup cg to want unless it already has
// it, and returns the value it found. Hosts whose memory controller is on
// cgroup v1 have no such file: the error wraps kernel.ErrUnsupported.
func Group(root string, mode kernel.Mode, cg string, want bool) (old, changed bool, err error) {
	old, err = kernel.ReadOOMGroup(root, mode, cg)
	if err != nil {
		return false, false, fmt.Errorf("read memory.oom.group of %s: %w", cg, err)
	}
	if old == want {
		return old, false, nil
	}
	if err := kernel.WriteOOMGroup(root, mode, cg, want); err != nil {
		return old, false, fmt.Errorf("set memory.oom.group of %s: %w", cg, err)
	}
	return old, true, nil
}
