//go:build e2e

package kernel

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// On the kernel's own cgroup tree a walk lists only the cgroups that hold
// others (their link counts say which): it still finds every nested one.
func TestE2EWalkCgroupFindsNestedCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	mode := DetectMode("/")
	if !kernelFS(MemoryCgroupDir("/", mode, "/")) {
		t.Skip("the memory controller's hierarchy is not the kernel's cgroupfs here")
	}
	cg := fmt.Sprintf("/oomguard-walk-%d", os.Getpid())
	top := MemoryCgroupDir("/", mode, cg)
	made := []string{"", "/a", "/a/b", "/a/b/c", "/a/d", "/e"}
	for i, m := range made {
		if err := os.Mkdir(top+m, 0o755); err != nil {
			if i == 0 {
				t.Skipf("cannot make a cgroup here: %v", err)
			}
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			os.Remove(top + made[i])
		}
	})
	var seen, leaves []string
	err := WalkCgroup("/", mode, cg, func(d *CgroupDir) error {
		p := strings.TrimPrefix(d.path, top)
		seen = append(seen, p)
		if leaf(d) {
			leaves = append(leaves, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	slices.Sort(leaves)
	if !slices.Equal(seen, made) {
		t.Fatalf("walked %q, want %q", seen, made)
	}
	if want := []string{"/a/b/c", "/a/d", "/e"}; !slices.Equal(leaves, want) {
		t.Fatalf("leaves %q, want %q", leaves, want)
	}
}
