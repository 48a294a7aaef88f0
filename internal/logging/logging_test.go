package logging

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "hook.log")
	log, c, err := Open(Options{Level: "warn", Format: "json", File: p}, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	c.Close()
	b, _ := os.ReadFile(p)
	if strings.Contains(string(b), "hidden") || !strings.Contains(string(b), `"msg":"shown","k":1`) {
		t.Fatalf("log file: %s", b)
	}
}

func TestOpenFallsBack(t *testing.T) {
	var buf bytes.Buffer
	log, c, err := Open(Options{Level: "info", Format: "text", File: "/proc/no/such/dir/x.log"}, "t", &buf)
	defer c.Close()
	if err == nil || !strings.Contains(err.Error(), "/proc/no/such/dir/x.log") {
		t.Fatalf("want an error naming the file, got %v", err)
	}
	log.Info("still logged")
	if !strings.Contains(buf.String(), "still logged") {
		t.Fatalf("fallback got %q", buf.String())
	}
}

func TestSyslog(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w, err := dialSyslog("oomguard-hook", []string{filepath.Join(t.TempDir(), "missing"), sock})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	New(Options{Level: "info", Format: "text"}, w).Info("decision", "rule", "x")
	buf := make([]byte, 4096)
	n, err := l.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	msg := string(buf[:n])
	if !strings.HasPrefix(msg, "<30>") || !strings.Contains(msg, " oomguard-hook[") || !strings.Contains(msg, "msg=decision rule=x") {
		t.Fatalf("datagram %q", msg)
	}
	if _, err := dialSyslog("x", []string{filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Fatal("want an error when no socket listens")
	}
}

// Each datagram carries its record's severity (facility daemon): journalctl
// -p warning finds the warnings and errors.
func TestSyslogSeverity(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w, err := dialSyslog("oomguard-nri", []string{sock})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	log := New(Options{Level: "debug", Format: "json"}, w).With("component", "x")
	for _, tc := range []struct {
		log  func(string, ...any)
		want string
	}{
		{log.Debug, "<31>"}, {log.Info, "<30>"}, {log.Warn, "<28>"}, {log.Error, "<27>"},
	} {
		tc.log("m")
		buf := make([]byte, 4096)
		n, err := l.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if msg := string(buf[:n]); !strings.HasPrefix(msg, tc.want) || !strings.Contains(msg, `"component":"x"`) {
			t.Errorf("datagram %q, want priority %s", msg, tc.want)
		}
	}
}

// A log file at its limit is rotated when opened: one generation kept.
func TestOpenRotated(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hook.log")
	for i, want := range []struct{ cur, old string }{{"a", ""}, {"ab", ""}, {"c", "ab"}, {"cd", "ab"}, {"e", "cd"}} {
		f, err := openRotated(p, 2)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(string(rune('a' + i))))
		f.Close()
		cur, _ := os.ReadFile(p)
		old, _ := os.ReadFile(p + ".1")
		if string(cur) != want.cur || string(old) != want.old {
			t.Fatalf("open %d: %q and %q, want %q and %q", i, cur, old, want.cur, want.old)
		}
	}
}
