//go:build e2e

package execwatch

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestE2EExecSeen: a process that execs is reported by the real kernel.
func TestE2EExecSeen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process connector needs CAP_NET_ADMIN")
	}
	w, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command("/bin/sleep", "0.2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pids, err := w.Read(nil)
		if err != nil && err != ErrLost {
			t.Fatal(err)
		}
		if slices.Contains(pids, cmd.Process.Pid) {
			return
		}
	}
	t.Fatalf("the exec of pid %d was not reported", cmd.Process.Pid)
}
