package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/oomkills"
)

// Run runs the plugin until ctx ends, or, launched, until the runtime
// closes its connection: the metrics, the connection to the runtime, and
// beside it the verifier, the exec and kill watchers, the configuration's
// reloads, the Events and the runtime's restart state. It returns when
// every part it started has: the connection first, then what reads the
// node, then the node's condition, which says the plugin stopped.
//
// The node's lock (lead.go) decides what this instance does: holding it,
// everything; standing by (another instance holds it), it connects,
// decides, and writes new containers only as lead.go says, until it takes
// the lock. The lock is let go last, once the Events and the node's
// condition are written: its successor starts where this one stopped.
func (p *Plugin) Run(ctx context.Context) error {
	if p.o.HealthSocket != "" {
		p.m.ServeHealth(ctx, p.o.HealthSocket, p.log)
	}
	standby := p.takeLock()
	if p.lock != nil {
		defer p.lock.close()
	}
	readers, reporters := newGroup(ctx), newGroup(ctx)
	readers.start(func(ctx context.Context) { p.watchConfig(ctx, p.o.ConfigPath, p.nri.ReloadInterval.Duration) })
	readers.start(func(ctx context.Context) {
		if standby {
			if !p.waitLock(ctx) {
				return
			}
			p.takeOver()
		}
		p.lead(ctx)
	})
	if r, ok := p.events.(interface{ Run(context.Context) }); ok {
		reporters.start(r.Run)
	}
	if p.o.Runtime != nil {
		reporters.start(func(ctx context.Context) { p.watchRuntime(ctx, *p.o.Runtime) })
	}
	err := p.serve(ctx, p.nri, p.o.Launched)
	readers.stop()
	p.background.Wait()
	reporters.stop()
	return err
}

// lead runs, while this instance holds the node's lock, what runs once on
// a node: the metrics port, the verifier, the reconciler, the exec and
// kill watchers.
func (p *Plugin) lead(ctx context.Context) {
	if p.nri.MetricsAddress != "" {
		p.m.Serve(ctx, p.nri.MetricsAddress, p.log)
	}
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){
		func(ctx context.Context) { p.verifyLoop(ctx, p.nri.VerifyInterval.Duration) },
		func(ctx context.Context) { p.reconcileLoop(ctx, p.nri.VerifyInterval.Duration) },
		func(ctx context.Context) { p.watchExecs(ctx, p.execs) },
		func(ctx context.Context) { p.watchKills(ctx, oomkills.Log{Open: p.kmsg}) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	wg.Wait()
}

// group is goroutines stopped together: stop cancels their context and
// waits for them.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newGroup's context keeps ctx's values but not its end: the group ends
// when Run says so.
func newGroup(ctx context.Context) *group {
	g := &group{}
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return g
}

func (g *group) start(f func(context.Context)) {
	g.wg.Add(1)
	go func() { defer g.wg.Done(); f(g.ctx) }()
}

func (g *group) stop() {
	g.cancel()
	g.wg.Wait()
}

// serve keeps the plugin connected until ctx ends. When the runtime
// launched it, the connection is the runtime's and ends with it; otherwise
// it reconnects with backoff, so a runtime restart never leaves it
// crash-looping.
func (p *Plugin) serve(ctx context.Context, cfg config.NRI, launched bool) error {
	backoff := time.Second
	for {
		start := time.Now()
		err := p.connectOnce(ctx, cfg, launched)
		p.m.setConnected(false)
		if ctx.Err() != nil {
			return nil
		}
		if launched {
			return fmt.Errorf("connection from the runtime closed: %w", err)
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		p.log.Warn("not connected to the runtime; retrying", "socket", cfg.Socket, "in", backoff, "err", err)
		if !waitRetry(ctx, cfg.Socket, backoff) {
			return nil
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// waitRetry waits out backoff, or less when the socket was missing and
// appears (NRI switched on, the runtime restarted): false when ctx ends.
func waitRetry(ctx context.Context, socket string, backoff time.Duration) bool {
	_, err := os.Stat(socket)
	missing := err != nil
	deadline := time.NewTimer(backoff)
	defer deadline.Stop()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true
		case <-poll.C:
			if _, err := os.Stat(socket); missing && err == nil {
				return true
			}
		}
	}
}

func (p *Plugin) connectOnce(ctx context.Context, cfg config.NRI, launched bool) error {
	opts := []stub.Option{stub.WithLogger(nriLogger{p.log}), stub.WithSocketPath(cfg.Socket)}
	if !launched {
		opts = append(opts, stub.WithPluginName(cfg.PluginName), stub.WithPluginIdx(cfg.PluginIndex))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	err = s.Run(ctx)
	if err == nil {
		err = errors.New("connection closed")
	}
	return err
}

// nriLogger sends the NRI library's log through slog.
type nriLogger struct{ l *slog.Logger }

func (n nriLogger) Debugf(_ context.Context, f string, a ...any) { n.l.Debug(fmt.Sprintf(f, a...)) }
func (n nriLogger) Infof(_ context.Context, f string, a ...any)  { n.l.Debug(fmt.Sprintf(f, a...)) }
func (n nriLogger) Warnf(_ context.Context, f string, a ...any)  { n.l.Warn(fmt.Sprintf(f, a...)) }
func (n nriLogger) Errorf(_ context.Context, f string, a ...any) { n.l.Error(fmt.Sprintf(f, a...)) }

var _ nrilog.Logger = nriLogger{}
