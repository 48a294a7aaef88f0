package logging

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// syslogSockets are where syslog daemons and journald listen.
var syslogSockets = []string{"/dev/log", "/var/run/syslog", "/var/run/log"}

// syslogWriter sends each Write as one RFC 3164 datagram. It is written on
// syscall rather than log/syslog, which pulls in package net and costs the
// hook a millisecond of start-up on every container creation.
type syslogWriter struct {
	fd  int
	hdr string // tag and pid; the priority and timestamp go before it
	pri int    // the next datagram's: facility daemon, the record's severity
}

const facilityDaemon = 3 << 3

// severity is RFC 5424's for a slog level, so that `journalctl -p warning`
// finds warnings and errors.
func severity(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

// syslogHandler gives each record's datagram the record's severity: the
// writer's priority is set and the record written under one lock.
type syslogHandler struct {
	slog.Handler
	w  *syslogWriter
	mu *sync.Mutex
}

func (h syslogHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.w.pri = facilityDaemon | severity(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h syslogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return syslogHandler{h.Handler.WithAttrs(as), h.w, h.mu}
}

func (h syslogHandler) WithGroup(name string) slog.Handler {
	return syslogHandler{h.Handler.WithGroup(name), h.w, h.mu}
}

func dialSyslog(tag string, sockets []string) (*syslogWriter, error) {
	var errs []error
	for _, p := range sockets {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: p}); err != nil {
			syscall.Close(fd)
			errs = append(errs, &os.PathError{Op: "connect", Path: p, Err: err})
			continue
		}
		return &syslogWriter{fd: fd, hdr: tag + "[" + strconv.Itoa(os.Getpid()) + "]: ", pri: facilityDaemon | 6}, nil
	}
	return nil, errors.Join(errs...)
}

func (w *syslogWriter) Write(b []byte) (int, error) {
	msg := "<" + strconv.Itoa(w.pri) + ">" + time.Now().Format(time.Stamp) + " " + w.hdr + string(b)
	if _, err := syscall.Write(w.fd, []byte(msg)); err != nil {
		return 0, &os.PathError{Op: "write", Path: "syslog", Err: err}
	}
	return len(b), nil
}

func (w *syslogWriter) Close() error { return syscall.Close(w.fd) }
