package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sirupsen/logrus"
)

func readShipped(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMain(m *testing.M) {
	if os.Getenv("OOMGUARD_TEST_MAIN") == "1" { // this binary, run as oomguard-nri
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if node := os.Getenv("OOMGUARD_TEST_RUNTIME"); node != "" { // this binary, run as a runtime
		os.Exit(standInRuntime(node))
	}
	logrus.SetLevel(logrus.ErrorLevel) // the NRI adaptation's own chatter
	os.Exit(m.Run())
}

// containerd and CRI-O start a plugin from /opt/nri/plugins with its output
// going nowhere: launched, the plugin logs to nri.log_file instead.
func TestLaunchedPluginLogsToLogFile(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "nri.log")
	cfg := strings.Replace(readShipped(t), `log_file = "syslog"`, `log_file = "`+logFile+`"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := os.NewFile(uintptr(fds[0]), "plugin-end")
	syscall.Close(fds[1]) // no runtime: registration fails, and the plugin says so
	cmd := exec.Command(os.Args[0], "--config", filepath.Join(dir, "config.toml"))
	cmd.Env = append(os.Environ(), "OOMGUARD_TEST_MAIN=1", "NRI_PLUGIN_SOCKET=3", "NRI_PLUGIN_NAME=oomguard", "NRI_PLUGIN_IDX=10")
	cmd.ExtraFiles = []*os.File{conn}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil {
		t.Fatal("want the plugin to fail without a runtime")
	}
	conn.Close()
	b, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(b), "component=oomguard-nri") || !strings.Contains(string(b), "level=ERROR") {
		t.Fatalf("log file: %q, %v (output: %q)", b, err, out.String())
	}
	if out.Len() != 0 {
		t.Fatalf("launched, the plugin wrote to its output, which the runtime discards: %q", out.String())
	}
}
