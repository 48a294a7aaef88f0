//go:build e2e

package enforce

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
)

// A container whose processes fork and exit all the time (a shell loop, a
// build): processes that exit while their score is written are gone, not
// errors, on this machine's real /proc and cgroups.
func TestE2EScoresUnderForkChurn(t *testing.T) {
	mode := kernel.DetectMode("/")
	parent := "/libpod_parent"
	cg := fmt.Sprintf("%s/oomguard-churn-%d", parent, os.Getpid())
	dir := kernel.MemoryCgroupDir("/", mode, cg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup here: %v", err)
	}
	defer os.Remove(dir)
	sh := exec.Command("sh", "-c", "while :; do /bin/true & /bin/true & /bin/true & wait; done")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sh.Process.Kill(); sh.Wait(); time.Sleep(100 * time.Millisecond) }()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sh.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := NewNode("/", []string{parent})
	c, err := n.Contain(cg)
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	changed := 0
	for i := range 300 {
		k, e := c.Scores(800 + i%2*100) // alternate, so that every pass writes
		changed += k
		errs = append(errs, e...)
	}
	if changed == 0 {
		t.Fatal("no process was ever scored: the test tests nothing")
	}
	if len(errs) > 0 {
		t.Fatalf("%d false errors under fork churn (%d processes scored), the first: %v", len(errs), changed, errs[0])
	}
}
