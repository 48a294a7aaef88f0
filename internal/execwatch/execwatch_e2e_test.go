//go:build e2e

package execwatch

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestE2EExecSeen: a process that execs is reported by the real kernel,
// and so is its fork.
func TestE2EExecSeen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process connector needs CAP_NET_ADMIN")
	}
	w, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command("/bin/sh", "-c", "/bin/sleep 0.2 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	sh := cmd.Process.Pid
	var execd, forked bool
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !(execd && forked); {
		evs, err := w.Read(nil)
		if err != nil && err != ErrLost {
			t.Fatal(err)
		}
		execd = execd || slices.ContainsFunc(evs, func(e Event) bool { return e.Pid == sh && e.Parent == 0 && e.Time > 0 && e.Time <= Now() })
		forked = forked || slices.ContainsFunc(evs, func(e Event) bool { return e.Parent == sh })
	}
	if !execd || !forked {
		t.Fatalf("pid %d: exec reported %v, its fork %v", sh, execd, forked)
	}
}

// TestE2EOnlyExecsAndForksWake: the kernel drops every other event (exits,
// threads) before it reaches oomguard: each datagram read holds an exec or
// a process's fork.
func TestE2EOnlyExecsAndForksWake(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process connector needs CAP_NET_ADMIN")
	}
	w, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Processes that exit, and a Go program's threads (this test's own binary).
	if out, err := exec.Command("/bin/sh", "-c", `for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done; "$0" -test.run '^$'`, os.Args[0]).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var evs []Event
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		if evs, err = w.Read(evs); err != nil && err != ErrLost {
			t.Fatal(err)
		}
	}
	if w.datagrams == 0 || len(evs) < w.datagrams {
		t.Fatalf("%d datagrams woke the reader for %d execs and forks: the kernel passed others", w.datagrams, len(evs))
	}
	t.Logf("%d datagrams, %d events", w.datagrams, len(evs))
}
