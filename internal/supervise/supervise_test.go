package supervise

import (
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary is its own worker: SUPERVISE_TEST_WORKER says how it ends.
func TestMain(m *testing.M) {
	switch os.Getenv("SUPERVISE_TEST_WORKER") {
	case "killed": // as the OOM killer ends it
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "stops": // runs until told to stop, then stops cleanly
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		os.Stdout.WriteString("ready\n")
		<-c
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func worker(how string) func(int) *exec.Cmd {
	return func(int) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SUPERVISE_TEST_WORKER="+how)
		return cmd
	}
}

// starts records when each worker started.
type starts struct {
	mu sync.Mutex
	at []time.Time
}

func (s *starts) add(int) {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
}

func (s *starts) snapshot() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// A worker that dies (SIGKILL: the OOM killer) is started again at once,
// then after a backoff that doubles up to its bound, never more: kubelet's
// CrashLoopBackOff (10 s, 20 s … 5 min) never applies.
func TestRestartsAtOnceThenBounded(t *testing.T) {
	var s starts
	sig := make(chan os.Signal, 1)
	b := Backoff{First: 40 * time.Millisecond, Max: 160 * time.Millisecond, Stable: time.Hour}
	done := make(chan int, 1)
	go func() {
		done <- Run(sig, Options{Command: worker("killed"), Backoff: b, Log: slog.New(slog.DiscardHandler), Started: s.add})
	}()
	for deadline := time.Now().Add(30 * time.Second); len(s.snapshot()) < 7; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d starts in 30 s", len(s.snapshot()))
		}
	}
	sig <- syscall.SIGTERM
	select {
	case <-done: // the worker's status: killed, by itself or by the SIGTERM
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
	at := s.snapshot()
	// A worker of this test lives a few milliseconds: the gaps are the
	// backoff plus that, never more than the bound plus a second.
	for i := 1; i < len(at); i++ {
		gap := at[i].Sub(at[i-1])
		if want := b.Delay(i - 1); gap < want || gap > want+time.Second {
			t.Errorf("restart %d after %s, want %s and a start", i, gap, want)
		}
	}
}

// Told to stop, the supervisor forwards the signal, waits for the worker,
// returns its status and starts no other.
func TestStopIsForwarded(t *testing.T) {
	var s starts
	sig := make(chan os.Signal, 1)
	cmd := worker("stops")
	var out *os.File
	done := make(chan int, 1)
	r, w, _ := os.Pipe()
	out = w
	go func() {
		done <- Run(sig, Options{Command: func(n int) *exec.Cmd { c := cmd(n); c.Stdout = out; return c }, Backoff: DefaultBackoff,
			Log: slog.New(slog.DiscardHandler), Started: s.add})
	}()
	buf := make([]byte, 6)
	if _, err := r.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("the worker did not start: %q %v", buf, err)
	}
	sig <- syscall.SIGTERM
	select {
	case status := <-done:
		if status != 0 {
			t.Fatalf("status %d, want the worker's 0", status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if n := len(s.snapshot()); n != 1 {
		t.Fatalf("%d workers started, want 1", n)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := DefaultBackoff
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second}
	for n, w := range want {
		if d := b.Delay(n); d != w {
			t.Errorf("Delay(%d) = %s, want %s", n, d, w)
		}
	}
}
