package vm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestArchiveIsReadByCpio(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox is not installed")
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tree", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "tree", "sub", "f"), []byte("abc"), 0o640)
	os.Symlink("sub/f", filepath.Join(dir, "tree", "link"))

	a := newArchive()
	a.file("/init", []byte("#!/bin/sh\n"), 0o755)
	a.symlink("/bin/sh", "/bin/busybox")
	if err := a.copyTree("/bundles/x", filepath.Join(dir, "tree")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := a.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.MkdirAll(out, 0o755)
	cmd := exec.Command(busybox, "cpio", "-i", "-d")
	cmd.Dir, cmd.Stdin = out, &buf
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v: %s", err, b)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "bundles/x/sub/f")); string(b) != "abc" {
		t.Fatalf("file content %q", b)
	}
	if st, _ := os.Stat(filepath.Join(out, "init")); st == nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("init mode %v", st)
	}
	if l, _ := os.Readlink(filepath.Join(out, "bundles/x/link")); l != "sub/f" {
		t.Fatalf("link %q", l)
	}
	if l, _ := os.Readlink(filepath.Join(out, "bin/sh")); l != "/bin/busybox" {
		t.Fatalf("link %q", l)
	}
}

func TestParseConsole(t *testing.T) {
	console := strings.Join([]string{
		"[    0.000000] Linux version 6.1.0",
		"@@BOOTED kernel=6.1.0 cgroupfs=cgroup2 variant=without",
		"@@RESULT daemon=sshd state=dead",
		"@@RESULT pod_exit=137\r",
		"@@DMESG [    4.1] Out of memory: Killed process 88 (sshd) total-vm:9000kB, anon-rss:8192kB, UID:0 pgtables:40kB oom_score_adj:0",
		"@@DMESG [    2.9] Memory cgroup out of memory: Killed process 112 (tail) total-vm:50536kB, UID:0 pgtables:136kB oom_score_adj:-997",
		"@@DMESG [    2.9] Tasks in /oomguard-e2e/pod are going to be killed due to memory.oom.group set",
		"@@DONE status=0",
	}, "\n")
	r := ParseConsole(console)
	if len(r.Results) != 2 || r.Result("pod_exit")["pod_exit"] != "137" || r.Result("daemon")["state"] != "dead" {
		t.Fatalf("results %v", r.Results)
	}
	want := []Kill{
		{Pid: 88, Comm: "sshd", Adj: 0, Reason: "Out of memory"},
		{Pid: 112, Comm: "tail", Adj: -997, Memcg: true, Reason: "Memory cgroup out of memory"},
	}
	if !slices.Equal(r.Killed, want) {
		t.Fatalf("killed %+v", r.Killed)
	}
	if err := ExpectKilled(r, "tail", "sshd"); err != nil {
		t.Fatal(err)
	}
	if err := ExpectKilled(r, "tail"); err == nil || !strings.Contains(err.Error(), "[sshd tail]") {
		t.Fatalf("ExpectKilled: %v", err)
	}
}

// Each runtime's configuration is in testdata and names the pause image the
// VM imports.
func TestRuntimeConfigs(t *testing.T) {
	for _, rt := range []Runtime{Containerd2, Containerd17, Containerd17Old, CRIO} {
		b, err := runtimeConfigs.ReadFile("testdata/runtimes/" + rt.configBody)
		if err != nil || !strings.Contains(string(b), PauseImage) {
			t.Errorf("%s: %v, or no %s in it", rt.Component, err, PauseImage)
		}
	}
}
