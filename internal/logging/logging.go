// Package logging builds the slog logger every oomguard program uses: a
// level, a format, and a destination (a file, syslog or stderr).
package logging

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

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
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if l.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	if sw, ok := w.(*syslogWriter); ok {
		h = syslogHandler{h, sw, new(sync.Mutex)}
	}
	return slog.New(h)
}

// MaxFileBytes is where a log file is rotated when it is opened: it is
// renamed FILE.1 (the one before goes) and a new one started, so a node's
// log of container creations never grows without bound.
const MaxFileBytes = 10 << 20

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
			w, err = openRotated(l.File, MaxFileBytes)
		}
	}
	if err != nil {
		return New(l, fallback), nopCloser{}, fmt.Errorf("open log %q (logging to stderr instead): %w", l.File, err)
	}
	return New(l, w), w, nil
}

// openRotated appends to path, first renaming it path.1 when it holds limit
// bytes or more. Two processes rotating at once lose at most the older
// generation.
func openRotated(path string, limit int64) (io.WriteCloser, error) {
	f, err := safeio.OpenAppend(path, 0o640)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.Size() < limit {
		return f, nil
	}
	f.Close()
	if err := os.Rename(path, path+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("rotate %s: %w", path, err)
	}
	return safeio.OpenAppend(path, 0o640)
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
