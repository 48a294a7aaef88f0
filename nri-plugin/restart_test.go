package nriplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kubeapi"
	"github.com/oomguard/oomguard/internal/restartstate"
)

// fakeNode is a node's /proc with its runtime's process, and what the
// plugin did to it: restarts, slots and the node's condition.
type fakeNode struct {
	root      string
	restarts  []string
	slotsFree bool
	held      bool
	released  int
	failWith  error
	cond      []string // status reason, each time set
	setErr    error    // Set fails with it
	sets      int      // Set's calls
	acquires  int      // Acquire's calls
}

func (n *fakeNode) runtime(pid, start int) kernel.Started {
	d := filepath.Join(n.root, "proc", strconv.Itoa(pid))
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, "stat"), fmt.Appendf(nil, "%d (containerd) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 1 1\n", pid, start), 0o644)
	return kernel.Started{PID: pid, Comm: "containerd", Start: uint64(start)}
}

func (n *fakeNode) restart(root, unit string) (string, error) {
	n.restarts = append(n.restarts, unit)
	if n.failWith != nil {
		return "/org/freedesktop/systemd1/job/9", n.failWith
	}
	os.RemoveAll(filepath.Join(n.root, "proc", "40"))
	n.runtime(41, 5000)
	return "/org/freedesktop/systemd1/job/8", nil
}

func (n *fakeNode) Acquire(context.Context) (bool, error) {
	n.acquires++
	if n.slotsFree {
		n.held = true
	}
	return n.held, nil
}
func (n *fakeNode) Renew(context.Context) error { return nil }
func (n *fakeNode) Release(context.Context) error {
	n.held = false
	n.released++
	return nil
}
func (n *fakeNode) Set(_ context.Context, status, reason, _ string) error {
	n.sets++
	if n.setErr != nil {
		return n.setErr
	}
	n.cond = append(n.cond, status+" "+reason)
	return nil
}

// A node whose runtime has not restarted since install wrote its drop-in:
// the plugin is waiting, not failing (/healthz 200, the gauge, the node's
// condition); when it may restart it, it does so once it holds a slot,
// frees the slot once the runtime serves NRI, and frees it too when the
// restart fails: the other nodes go on; this one waits for its operator.
func TestRuntimeWatch(t *testing.T) {
	for name, tc := range map[string]struct {
		restart   bool
		slotsFree bool
		failWith  error
		connects  bool // the runtime serves NRI after the restart
		want      []string
	}{
		"the operator restarts":       {connects: true, want: []string{"True RuntimeRestartPending", "False NRIConnected"}},
		"oomguard restarts, a slot":   {restart: true, slotsFree: true, connects: true, want: []string{"True RuntimeRestartPending", "False NRIConnected"}},
		"oomguard restarts, no slot":  {restart: true, want: []string{"True RuntimeRestartPending"}},
		"the restart's job fails":     {restart: true, slotsFree: true, failWith: errors.New(`job ended "failed"`), want: []string{"True RuntimeRestartPending", "True RuntimeRestartFailed"}},
		"restarted, never serves NRI": {restart: true, slotsFree: true, want: []string{"True RuntimeRestartPending", "True RuntimeRestartFailed"}},
	} {
		t.Run(name, func(t *testing.T) {
			n := &fakeNode{root: t.TempDir(), slotsFree: tc.slotsFree, failWith: tc.failWith}
			state := filepath.Join(t.TempDir(), "state.json")
			if err := restartstate.Write(state, restartstate.State{Socket: "/var/run/nri/nri.sock",
				Pending: []restartstate.Pending{{Unit: "containerd.service", Process: n.runtime(40, 1000)}}}); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			m := NewMetrics()
			p := New(Options{Config: config.Default(), Root: n.root, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m})
			addr := serveMetrics(t, m)
			w := RuntimeWatch{State: state, Condition: n, Connect: time.Hour}
			if tc.restart {
				w.Restart, w.Slots = n.restart, n
			}
			r := newRestarter(p, w)
			r.started = time.Time{} // connected or not, said at once
			ctx := context.Background()

			r.step(ctx)
			if code, body := get(t, addr); code != http.StatusOK || !strings.Contains(body, "waiting for containerd.service to restart") {
				t.Fatalf("waiting: /healthz %d %q", code, body)
			}
			if got := testutil.ToFloat64(m.restartWait); got != 1 && len(n.restarts) == 0 {
				t.Fatalf("oomguard_runtime_restart_pending %v while waiting", got)
			}
			if !tc.restart { // the operator's restart
				os.RemoveAll(filepath.Join(n.root, "proc", "40"))
				n.runtime(41, 5000)
			}
			if tc.restart && !tc.slotsFree && len(n.restarts) != 0 {
				t.Fatalf("restarted without a slot: %v", n.restarts)
			}
			if tc.connects {
				m.setConnected(true)
			} else if len(n.restarts) > 0 && tc.failWith == nil {
				r.w.Connect = time.Nanosecond // the runtime had its time
			}
			r.step(ctx)
			r.step(ctx)
			if got := strings.Join(n.cond, ", "); got != strings.Join(tc.want, ", ") {
				t.Fatalf("the node's condition: %s, want %s\n%s", got, strings.Join(tc.want, ", "), logs.String())
			}
			failed := testutil.ToFloat64(m.restarts.WithLabelValues("failure"))
			succeeded := testutil.ToFloat64(m.restarts.WithLabelValues("success"))
			switch {
			case !tc.restart || !tc.slotsFree:
				if failed+succeeded != 0 || len(n.restarts) != 0 {
					t.Fatalf("restarts %v, counted %v/%v", n.restarts, succeeded, failed)
				}
			case tc.connects:
				if succeeded != 1 || len(n.restarts) != 1 || n.held || n.released != 1 {
					t.Fatalf("a restart that worked: restarts %v, counted %v, slot held %v", n.restarts, succeeded, n.held)
				}
			default:
				if failed != 1 || len(n.restarts) != 1 || n.held || n.released != 1 {
					t.Fatalf("a restart that failed: restarts %v, counted %v, slot held %v (want freed)\n%s", n.restarts, failed, n.held, logs.String())
				}
				if !strings.Contains(logs.String(), "freeing the restart slot") {
					t.Fatalf("the failed restart's log does not say the slot was freed:\n%s", logs.String())
				}
				if code, _ := get(t, addr); code != http.StatusServiceUnavailable {
					t.Fatalf("a failed restart: /healthz %d, want 503", code)
				}
				m.setConnected(true) // the operator fixed it
				r.step(ctx)
				if n.held || n.released != 1 || len(n.restarts) != 1 || !strings.HasSuffix(strings.Join(n.cond, ", "), "False NRIConnected") {
					t.Fatalf("fixed: slot held %v, restarts %v, condition %v", n.held, n.restarts, n.cond)
				}
			}
		})
	}
}

// The plugin stopping (its pod deleted, the chart uninstalled) leaves the
// node's condition Unknown: nothing there reports the runtime any more.
func TestRuntimeWatchStops(t *testing.T) {
	n := &fakeNode{root: t.TempDir()}
	state := filepath.Join(t.TempDir(), "state.json")
	restartstate.Write(state, restartstate.State{Pending: []restartstate.Pending{{Unit: "crio.service", Process: n.runtime(40, 1000)}}})
	p := New(Options{Config: config.Default(), Root: n.root, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.watchRuntime(ctx, RuntimeWatch{State: state, Condition: n, Interval: time.Hour})
		close(done)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p.m.waiting.Load() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never waiting")
		}
	}
	cancel()
	<-done
	if got := strings.Join(n.cond, ", "); got != "True RuntimeRestartPending, Unknown PluginStopped" {
		t.Fatalf("the node's condition: %s", got)
	}
}

// restarterOn is a restarter on n's node whose runtime waits for a restart.
func restarterOn(t *testing.T, n *fakeNode, restart bool) (*restarter, *bytes.Buffer) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state.json")
	restartstate.Write(state, restartstate.State{Pending: []restartstate.Pending{{Unit: "containerd.service", Process: n.runtime(40, 1000)}}})
	var logs bytes.Buffer
	p := New(Options{Config: config.Default(), Root: n.root, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics()})
	l, err := openNodeLock(n.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	p.lock = l
	w := RuntimeWatch{State: state, Condition: n, Connect: time.Hour}
	if restart {
		w.Restart, w.Slots = n.restart, n
	}
	r := newRestarter(p, w)
	r.started = time.Time{} // connected or not, said at once
	return r, &logs
}

// A node waiting for a slot asks again after a backoff, not at each look:
// a fleet's waiting nodes are thousands, and a rollout takes hours.
func TestSlotWaitBacksOff(t *testing.T) {
	n := &fakeNode{root: t.TempDir()}
	r, _ := restarterOn(t, n, true)
	for range 100 {
		r.step(context.Background())
	}
	if n.acquires != 1 {
		t.Fatalf("%d tries for a slot in 100 looks at once, want 1", n.acquires)
	}
	for i := range 5 {
		r.slotNext = time.Time{} // the backoff's wait is over
		r.step(context.Background())
		if got := r.slotTries.Failures(); got != i+2 {
			t.Fatalf("failures %d, want %d", got, i+2)
		}
	}
	n.slotsFree = true
	r.slotNext = time.Time{}
	r.step(context.Background())
	if !n.held || len(n.restarts) != 1 || r.slotTries.Failures() != 0 {
		t.Fatalf("a free slot: held %v, restarts %v, failures %d", n.held, n.restarts, r.slotTries.Failures())
	}
}

// The node's condition is written when it changes, not when a worker starts
// again (a crash loop), nor at each look while the API server fails it.
func TestConditionWrittenOnChangeOnly(t *testing.T) {
	n := &fakeNode{root: t.TempDir()}
	r, _ := restarterOn(t, n, false)
	r.step(context.Background())
	r.step(context.Background())
	if n.sets != 1 {
		t.Fatalf("%d writes of one state, want 1", n.sets)
	}
	for range 3 { // the worker started again, three times
		again, _ := restarterOn(t, n, false)
		again.step(context.Background())
	}
	if n.sets != 1 {
		t.Fatalf("%d writes after the worker started again, want the first only", n.sets)
	}
	n.setErr = &kubeapi.Error{Code: http.StatusServiceUnavailable}
	r.p.m.setConnected(true)
	for range 100 {
		r.step(context.Background())
	}
	if n.sets != 2 || r.condTries.Failures() != 1 {
		t.Fatalf("%d writes (failures %d) while the API server fails, want one, then a backoff", n.sets, r.condTries.Failures())
	}
	n.setErr = nil
	r.condNext = time.Time{}
	r.step(context.Background())
	if got := strings.Join(n.cond, ", "); got != "True RuntimeRestartPending, False NRIConnected" || r.condTries.Failures() != 0 {
		t.Fatalf("the node's condition: %s", got)
	}
}

// A refusal (403: RBAC or the node-scoped policy; 404: no such node) is
// said once, clearly, and tried again an hour later, not every few seconds.
func TestConditionRefusedWaitsLong(t *testing.T) {
	for code, says := range map[int]string{http.StatusForbidden: "may not patch this node's status", http.StatusNotFound: "no Node has this name"} {
		n := &fakeNode{root: t.TempDir(), setErr: &kubeapi.Error{Method: "PATCH", Path: "/api/v1/nodes/x/status", Code: code}}
		r, logs := restarterOn(t, n, false)
		for range 100 {
			r.step(context.Background())
		}
		if n.sets != 1 || strings.Count(logs.String(), says) != 1 || time.Until(r.condNext) < 50*time.Minute {
			t.Fatalf("%d: %d writes, next in %s; log:\n%s", code, n.sets, time.Until(r.condNext), logs.String())
		}
	}
}

// A plugin just started says nothing about its connection before it had
// the time to connect: a rollout costs a node's condition two writes (the
// old plugin's Unknown, the new one's NRIConnected), a crash loop none.
func TestConditionWaitsForTheConnection(t *testing.T) {
	n := &fakeNode{root: t.TempDir()}
	r, _ := restarterOn(t, n, false)
	restartstate.Write(r.w.State, restartstate.State{Socket: "/var/run/nri/nri.sock"})
	r.started, r.w.Grace = time.Now(), time.Minute
	r.step(context.Background())
	if n.sets != 0 {
		t.Fatalf("the condition written before the plugin could connect: %v", n.cond)
	}
	r.p.m.setConnected(true)
	r.step(context.Background())
	again, _ := restarterOn(t, n, false) // a crash: the worker starts again
	restartstate.Write(again.w.State, restartstate.State{Socket: "/var/run/nri/nri.sock"})
	again.started, again.w.Grace = time.Now(), time.Minute
	again.step(context.Background())
	again.p.m.setConnected(true)
	again.step(context.Background())
	if got := strings.Join(n.cond, ", "); got != "False NRIConnected" {
		t.Fatalf("the node's condition: %s, want NRIConnected once", got)
	}
}
