//go:build e2e

package kmsg

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The real /dev/kmsg (root): the reader starts at the newest record, hands
// out what is written after it in order, and a process's line is no kill.
func TestE2EReadKmsg(t *testing.T) {
	r := openNewest(t)
	marker := fmt.Sprintf("oomguard-kmsg-test-%d", time.Now().UnixNano())
	line := "Out of memory: Killed process 1 (" + marker + ") total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0"
	if err := os.WriteFile("/dev/kmsg", []byte(line+"\n"), 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan Record, 1)
	go func() {
		for {
			rec, err := r.Read()
			if err != nil {
				close(done)
				return
			}
			if strings.Contains(rec.Msg, marker) {
				done <- rec
				return
			}
		}
	}()
	select {
	case rec, ok := <-done:
		if !ok {
			t.Fatal("the reader ended")
		}
		if rec.Priority>>3 == 0 {
			t.Fatalf("a process's line has the kernel's facility: %+v", rec)
		}
		var p Parser
		if k, ok := p.Feed(rec); ok {
			t.Fatalf("a process's line was taken for a kill: %+v", k)
		}
		// The kernel stamps with its scheduler clock, a hair off CLOCK_MONOTONIC.
		if now := Now(); now < rec.Time-time.Second || now-rec.Time > 10*time.Second {
			t.Fatalf("record time %s, now %s: not the same clock", rec.Time, now)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the line written was not read")
	}
}

// A Read waiting on the real /dev/kmsg ends at its deadline, and reads
// again once the deadline is cleared.
func TestE2EReadDeadline(t *testing.T) {
	r := openNewest(t)
	quiet := false
	for range 20 { // the kernel may log meanwhile
		if err := r.SetDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			t.Fatalf("SetDeadline on /dev/kmsg: %v", err)
		}
		if _, err := r.Read(); errors.Is(err, os.ErrDeadlineExceeded) {
			quiet = true
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !quiet {
		t.Fatal("no Read ended at its deadline")
	}
	r.SetDeadline(time.Time{})
	marker := fmt.Sprintf("oomguard-kmsg-deadline-%d", time.Now().UnixNano())
	if err := os.WriteFile("/dev/kmsg", []byte(marker+"\n"), 0); err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := r.Read()
		if err != nil {
			t.Fatalf("after the deadline was cleared: %v", err)
		}
		if strings.Contains(rec.Msg, marker) {
			return
		}
	}
}

// openNewest opens the real /dev/kmsg at its end (root), closed with the test.
func openNewest(t *testing.T) *Reader {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for /dev/kmsg")
	}
	r, err := Open("/dev/kmsg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
