//go:build e2e

package execwatch

import (
	"errors"
	"math/rand/v2"
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
	w.SetDeadline(time.Now().Add(10 * time.Second))
	for !(execd && forked) {
		evs, err := w.Read(nil)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
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
	w.SetDeadline(time.Now().Add(1500 * time.Millisecond))
	for {
		if evs, err = w.Read(evs); errors.Is(err, os.ErrDeadlineExceeded) {
			break
		} else if err != nil && err != ErrLost {
			t.Fatal(err)
		}
	}
	if w.datagrams == 0 || len(evs) < w.datagrams {
		t.Fatalf("%d datagrams woke the reader for %d execs and forks: the kernel passed others", w.datagrams, len(evs))
	}
	t.Logf("%d datagrams, %d events", w.datagrams, len(evs))
}

// TestE2ECloseEndsRead: a Read waiting (no deadline: nothing wakes it but
// an event) returns once the watcher is closed.
func TestE2ECloseEndsRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process connector needs CAP_NET_ADMIN")
	}
	for range 20 {
		w, err := Open()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			var err error
			for err == nil || err == ErrLost {
				_, err = w.Read(nil)
			}
			done <- err
		}()
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		w.Close()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrClosed) {
				t.Fatalf("Read after Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Read did not return after Close")
		}
	}
}
