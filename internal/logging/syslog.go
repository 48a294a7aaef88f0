package logging

import (
	"errors"
	"os"
	"strconv"
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
	hdr string // "<PRI>" and tag, the timestamp goes between
}

const syslogDaemonInfo = 3<<3 | 6 // facility daemon, severity info

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
		return &syslogWriter{fd: fd, hdr: tag + "[" + strconv.Itoa(os.Getpid()) + "]: "}, nil
	}
	return nil, errors.Join(errs...)
}

func (w *syslogWriter) Write(b []byte) (int, error) {
	msg := "<" + strconv.Itoa(syslogDaemonInfo) + ">" + time.Now().Format(time.Stamp) + " " + w.hdr + string(b)
	if _, err := syscall.Write(w.fd, []byte(msg)); err != nil {
		return 0, &os.PathError{Op: "write", Path: "syslog", Err: err}
	}
	return len(b), nil
}

func (w *syslogWriter) Close() error { return syscall.Close(w.fd) }
