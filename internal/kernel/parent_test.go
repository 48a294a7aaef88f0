package kernel

import (
	"os"
	"path/filepath"
	"testing"
)

// A process whose cgroup reads as the root's may be exiting: a zombie, or
// one the kernel has moved out of its cgroup on its way to being one
// (PF_EXITING set, state still running). Both count as exited.
func TestParent(t *testing.T) {
	for _, c := range []struct {
		name, stat string
		ppid       int
		exited     bool
	}{
		{"running", "1003 (sh) S 500 1003 1003 0 -1 4194560 0 0 0 0\n", 500, false},
		{"zombie", "1003 (forker) Z 600 1003 1003 0 -1 4194560 0 0 0 0\n", 600, true},
		{"dead", "1003 (forker) X 600 1003 1003 0 -1 4194560 0 0 0 0\n", 600, true},
		{"exiting", "1003 (forker) R 600 1003 1003 0 -1 4194564 0 0 0 0\n", 600, true},
		{"a name with ) Z 7 in it", "1003 (a) Z 7 (b) S 9 1003 1003 0 -1 4194560 0 0\n", 9, false},
	} {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "proc/1003"), 0o755)
		os.WriteFile(filepath.Join(root, "proc/1003/stat"), []byte(c.stat), 0o644)
		ppid, exited, err := Parent(root, 1003)
		if err != nil || ppid != c.ppid || exited != c.exited {
			t.Errorf("%s: Parent = %d, %v, %v; want %d, %v", c.name, ppid, exited, err, c.ppid, c.exited)
		}
	}
	if _, _, err := Parent(t.TempDir(), 1003); !os.IsNotExist(err) {
		t.Errorf("a gone process: %v, want not exist", err)
	}
}
