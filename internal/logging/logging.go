// Package logging builds the slog logger every oomguard program uses: a
// level, a format, and a destination (a file, syslog or stderr).
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/oomguard/oomguard/internal/safeio"
)

// Options say how and where to log.
type Options struct {
	Level  string // debug, info (default), warn, error
	Format string // text (default) or json
	// File is a path (appended to, its directory created), "syslog", or
	// "stderr" or "" for the fallback writer.
	File string
}

// New returns a logger writing to w at l's level and format.
func New(l Options, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level(l.Level)}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Open is New for programs that log to l.File: a path (appended to, its
// directory created), "syslog", or "stderr"/"" for the fallback writer.
// When the destination cannot be opened it logs to fallback and says why.
func Open(l Options, tag string, fallback io.Writer) (*slog.Logger, io.Closer, error) {
	var (
		w   io.WriteCloser
		err error
	)
	switch l.File {
	case "", "stderr":
		return New(l, fallback), nopCloser{}, nil
	case "syslog":
		w, err = dialSyslog(tag, syslogSockets)
	default:
		if err = os.MkdirAll(filepath.Dir(l.File), 0o755); err == nil {
			w, err = safeio.OpenAppend(l.File, 0o640)
		}
	}
	if err != nil {
		return New(l, fallback), nopCloser{}, fmt.Errorf("open log %q (logging to stderr instead): %w", l.File, err)
	}
	return New(l, w), w, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

func level(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
