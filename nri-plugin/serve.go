package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"

	"github.com/oomguard/oomguard/config"
)

// Serve runs the plugin until ctx ends. When the runtime launched it, the
// connection is the runtime's and ends with it; otherwise it reconnects with
// backoff, so a runtime restart never leaves it crash-looping.
func (p *Plugin) Serve(ctx context.Context, cfg config.NRI, launched bool) error {
	go p.verifyLoop(ctx, cfg.VerifyInterval.Duration)
	go p.watchExecs(ctx, p.execs)
	go p.watchKills(ctx, p.kmsg)
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
