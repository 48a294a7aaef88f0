// Package metricsserver serves an agent's /metrics and /healthz over plain
// HTTP, hardened for a port the node's network reaches, and never in the
// way of the agent's own work: an address that cannot be bound (a port
// taken) is logged, counted and retried.
package metricsserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// What one client may hold: nothing on the port may grow the agent (and get
// it OOM-killed while it guards the node) or keep Prometheus out for long.
const (
	maxConns          = 16
	maxHeaderBytes    = 8 << 10
	readHeaderTimeout = 2 * time.Second
	readTimeout       = 5 * time.Second
	// WriteTimeout bounds one answer; a /metrics handler's own timeout
	// belongs below it.
	WriteTimeout = 10 * time.Second
	idleTimeout  = 10 * time.Second
	listenRetry  = 10 * time.Second
)

// Serve serves h on addr until ctx ends, and returns at once. failed is
// called each time addr cannot be bound or serving it stops.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger, failed func()) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		for {
			ln, err := net.Listen("tcp", addr)
			if err == nil {
				log.Info("serving metrics", "address", ln.Addr().String())
				err = srv.Serve(limitListener(ln, maxConns))
				if errors.Is(err, http.ErrServerClosed) {
					return
				}
			}
			failed()
			log.Error("cannot serve metrics; the work goes on, retrying", "address", addr, "in", listenRetry, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(listenRetry):
			}
		}
	}()
}

// limitListener holds at most n connections open: the next is accepted only
// when one closes, and the kernel's backlog holds (or drops) the rest.
func limitListener(l net.Listener, n int) net.Listener {
	return &limited{Listener: l, slots: make(chan struct{}, n)}
}

type limited struct {
	net.Listener
	slots chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

type slotConn struct {
	net.Conn
	once atomic.Bool
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	if c.once.CompareAndSwap(false, true) {
		c.free()
	}
	return err
}
