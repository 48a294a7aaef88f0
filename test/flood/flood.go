// Package flood attacks an HTTP server the way anything on a node's network
// can: thousands of idle connections, headers sent a byte at a time, headers
// of nearly a megabyte, and keep-alive connections held open after a
// request. oomguard's tests and benchmark run it against the plugin's
// metrics port while containers are created.
package flood

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts what the flood did.
type Stats struct {
	Dialed, Failed, Requests atomic.Int64
}

// Options size the flood.
type Options struct {
	Idle, Slow, Huge, KeepAlive int // connections of each kind held at once
}

// Default is the flood of the issue that found the plugin open to it:
// 2,000 idle keep-alive connections and headers near 1 MiB.
var Default = Options{Idle: 2000, Slow: 200, Huge: 20, KeepAlive: 200}

// Start floods addr until ctx ends; Wait returns when every connection is closed.
func Start(ctx context.Context, addr string, o Options) (*Stats, func()) {
	s := &Stats{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	dial := func() net.Conn {
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			s.Failed.Add(1)
			return nil
		}
		s.Dialed.Add(1)
		mu.Lock()
		open[c] = true
		mu.Unlock()
		return &tracked{Conn: c, done: func() { mu.Lock(); delete(open, c); mu.Unlock() }}
	}
	run := func(n int, f func()) {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					f()
				}
			}()
		}
	}
	run(o.Idle, func() { // connect, send nothing
		if c := dial(); c != nil {
			c.SetReadDeadline(time.Now().Add(time.Minute))
			c.Read(make([]byte, 1)) // until the server gives up on it
			c.Close()
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	})
	run(o.Slow, func() { // a header a byte a second
		c := dial()
		if c == nil {
			time.Sleep(100 * time.Millisecond)
			return
		}
		defer c.Close()
		c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "))
		for ctx.Err() == nil {
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	})
	huge := "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Huge: " + strings.Repeat("h", 1<<20-64) + "\r\n\r\n"
	run(o.Huge, func() { // a header near 1 MiB
		c := dial()
		if c == nil {
			time.Sleep(100 * time.Millisecond)
			return
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte(huge))
		c.Read(make([]byte, 512))
		c.Close()
		s.Requests.Add(1)
	})
	run(o.KeepAlive, func() { // one request, then held idle
		c := dial()
		if c == nil {
			time.Sleep(100 * time.Millisecond)
			return
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		c.Read(make([]byte, 512))
		s.Requests.Add(1)
		c.Read(make([]byte, 1)) // held until the server closes it
		c.Close()
	})
	go func() {
		<-ctx.Done()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	}()
	return s, wg.Wait
}

type tracked struct {
	net.Conn
	done func()
}

func (t *tracked) Close() error {
	t.done()
	return t.Conn.Close()
}
