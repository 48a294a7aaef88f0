// Package enforce applies a decision to the kernel: a container's processes'
// oom_score_adj and its cgroup's memory.oom.group. Every write goes through a
// Container, which Contain checked to be one container's own cgroup, to that
// cgroup and the processes in it. Each write reads first and writes only what
// differs, and says what it found, so the hook, the plugin's create, start,
// Synchronize and verify paths all change and report a container the same way.
package enforce

import (
	"fmt"

	"github.com/oomguard/oomguard/internal/kernel"
)

func group(root string, mode kernel.Mode, cg string, want bool) (old, changed bool, err error) {
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
