// Package supervise keeps a worker process running: a small parent that
// starts the worker again at once when it dies, with a short bounded
// backoff, so that a plugin that crashes or is OOM-killed is back within a
// second or two instead of after kubelet's CrashLoopBackOff (10 s, 20 s …
// 5 min for a container that keeps dying). It forwards the signals it is
// sent and, once told to stop, starts nothing more.
package supervise

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Backoff is the delay before each restart: none for the first, then
// doubling from First up to Max; a worker that ran Stable or longer
// starts the count over.
type Backoff struct {
	First, Max, Stable time.Duration
}

// DefaultBackoff: 0, 100 ms, 200 ms … 2 s.
var DefaultBackoff = Backoff{First: 100 * time.Millisecond, Max: 2 * time.Second, Stable: time.Minute}

// Delay is the wait before restart n (0 for the first restart).
func (b Backoff) Delay(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := b.First
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Options are a supervision's.
type Options struct {
	// Command makes the worker's command for its n-th start (0 first).
	Command func(n int) *exec.Cmd
	Backoff Backoff
	Log     *slog.Logger
	// Started, when set, is told of each worker started (its pid).
	Started func(pid int)
}

// Stopping are the signals that stop the supervision: forwarded, then the
// worker's end is the supervisor's.
var Stopping = []os.Signal{syscall.SIGTERM, syscall.SIGINT}

// Run starts the worker and starts it again each time it exits, until a
// signal of Stopping arrives on signals: every signal is forwarded to the
// worker, and after a stopping one Run waits for the worker and returns its
// exit status. It returns 1 when a worker cannot be started at all.
func Run(signals <-chan os.Signal, o Options) int {
	// The worker gets SIGTERM if the supervisor dies (Pdeathsig): the
	// signal goes when the thread that started it ends, so one thread
	// starts every worker.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stopping := false
	for n := 0; ; n++ {
		cmd := o.Command(n)
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
		start := time.Now()
		if err := cmd.Start(); err != nil {
			o.Log.Error("cannot start the worker", "err", err)
			return 1
		}
		if o.Started != nil {
			o.Started(cmd.Process.Pid)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
	wait:
		for {
			select {
			case s := <-signals:
				cmd.Process.Signal(s)
				if isStopping(s) {
					stopping = true
				}
			case err = <-done:
				break wait
			}
		}
		status := exitStatus(err)
		if stopping {
			return status
		}
		ran := time.Since(start)
		if ran >= o.Backoff.Stable {
			n = 0
		}
		delay := o.Backoff.Delay(n)
		o.Log.Error("the worker died; starting it again", "pid", cmd.Process.Pid, "how", how(err), "ran", ran.Round(time.Millisecond), "in", delay, "restarts", n+1)
		if delay > 0 {
			t := time.NewTimer(delay)
		backoff:
			for {
				select {
				case s := <-signals:
					if isStopping(s) {
						t.Stop()
						return status
					}
				case <-t.C:
					break backoff
				}
			}
		}
	}
}

func isStopping(s os.Signal) bool {
	for _, st := range Stopping {
		if s == st {
			return true
		}
	}
	return false
}

// exitStatus is a worker's end as a shell's $? says it (128+n for signal n).
func exitStatus(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

// how says how a worker ended, for the log: a SIGKILL is what the OOM
// killer (or kill -9) sends.
func how(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ws.Signal() == syscall.SIGKILL {
				return "killed by SIGKILL (the OOM killer, or kill -9)"
			}
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
