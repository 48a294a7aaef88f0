package nriplugin

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/execwatch"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/podevents"
	"github.com/oomguard/oomguard/internal/restartstate"
)

// NRI switched on by the DaemonSet's init container appears as a socket at
// the runtime's next restart: the plugin connects then, not after its backoff.
func TestWaitRetryEndsWhenTheSocketAppears(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	go func() {
		time.Sleep(300 * time.Millisecond)
		if l, err := net.Listen("unix", sock); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !waitRetry(ctx, sock, time.Hour) || ctx.Err() != nil {
		t.Fatal("waitRetry waited out its backoff though the socket appeared")
	}
	cancel()
	if waitRetry(ctx, sock, time.Hour) {
		t.Fatal("waitRetry must end with its context")
	}
}

// blockingSource is an exec or kernel-log source that blocks until closed.
type blockingSource struct {
	closed chan struct{}
	once   sync.Once
}

func newBlockingSource() *blockingSource { return &blockingSource{closed: make(chan struct{})} }

func (b *blockingSource) wait() error { <-b.closed; return errors.New("closed") }
func (b *blockingSource) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}
func (b *blockingSource) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

type blockingExecs struct{ *blockingSource }

func (b blockingExecs) Read([]execwatch.Event) ([]execwatch.Event, error) { return nil, b.wait() }

type blockingKmsg struct{ *blockingSource }

func (b blockingKmsg) Read() (kmsg.Record, error)  { return kmsg.Record{}, b.wait() }
func (b blockingKmsg) SetDeadline(time.Time) error { return nil }

// stopCondition records what the node's condition said, and what had
// stopped when it said the plugin stopped.
type stopCondition struct {
	mu                  sync.Mutex
	said                []string
	readersStoppedFirst bool
	disconnectedFirst   bool
	execs, kmsg         *blockingSource
	events              *runRecorder
	m                   *Metrics
}

func (c *stopCondition) Set(_ context.Context, status, reason, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.said = append(c.said, status+" "+reason)
	if status == "Unknown" {
		c.readersStoppedFirst = c.execs.isClosed() && c.kmsg.isClosed()
		c.disconnectedFirst = !c.m.isConnected.Load()
	}
	return nil
}

// runRecorder is an Event recorder run beside the plugin.
type runRecorder struct{ ran, ended atomic.Bool }

func (r *runRecorder) Warning(podevents.Pod, string, string, string) {}
func (r *runRecorder) Run(ctx context.Context) {
	r.ran.Store(true)
	<-ctx.Done()
	r.ended.Store(true)
}

// Run starts every part and, once its context ends, stops them in order:
// the connection, then what reads the node (exec and kernel-log watchers),
// then what reports to the cluster (Events, and the node's condition,
// which says last that the plugin stopped); it returns after all of them.
func TestRunStopsInOrder(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.NRI.Socket = filepath.Join(dir, "nri.sock") // no runtime: the plugin retries
	state := filepath.Join(dir, "state.json")
	if err := restartstate.Write(state, restartstate.State{Socket: cfg.NRI.Socket}); err != nil {
		t.Fatal(err)
	}
	execs, kmsgs, events, m := newBlockingSource(), newBlockingSource(), &runRecorder{}, NewMetrics()
	cond := &stopCondition{execs: execs, kmsg: kmsgs, events: events, m: m}
	p := New(Options{Config: cfg, Root: dir, Metrics: m, Events: events,
		Runtime: &RuntimeWatch{State: state, Condition: cond, Interval: 10 * time.Millisecond, Grace: time.Nanosecond}})
	p.execs = func() (execSource, error) { return blockingExecs{execs}, nil }
	p.kmsg = from(blockingKmsg{kmsgs})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	for deadline := time.Now().Add(20 * time.Second); !events.ran.Load() || len(cond.saidSoFar()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start the Events recorder and the runtime's watch")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	said := cond.saidSoFar()
	if last := said[len(said)-1]; last != "Unknown PluginStopped" {
		t.Fatalf("the node's condition said %q last, want Unknown PluginStopped (all: %q)", last, said)
	}
	if !cond.readersStoppedFirst || !cond.disconnectedFirst {
		t.Fatalf("the condition said the plugin stopped before the watchers (%v) and the connection (%v) had", cond.readersStoppedFirst, cond.disconnectedFirst)
	}
	if !events.ended.Load() {
		t.Fatal("Run returned before the Events recorder had")
	}
}

func (c *stopCondition) saidSoFar() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.said...)
}
