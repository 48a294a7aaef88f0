package vm

import (
	"bytes"
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/policy"
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
	r := parseConsole(console)
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
	if err := expectKilled(r, "tail", "sshd"); err != nil {
		t.Fatal(err)
	}
	if err := expectKilled(r, "tail"); err == nil || !strings.Contains(err.Error(), "[sshd tail]") {
		t.Fatalf("expectKilled: %v", err)
	}
	if d := deadDaemons(r); !slices.Equal(d, []string{"sshd"}) {
		t.Fatalf("dead daemons %v", d)
	}
}

func TestScenariosAreComplete(t *testing.T) {
	if len(Scenarios()) < 2 {
		t.Fatalf("%d scenarios registered", len(Scenarios()))
	}
	for _, s := range Scenarios() {
		// The demo shows each incident without oomguard, then with it.
		driven := len(s.Variants) > 0 && s.Variants[0].Drive != nil // a cluster boot: its Drive checks as it goes
		if s.Name == "" || s.Title == "" || (s.Script == "") != driven || len(s.Variants) == 0 || (!s.Slow && (len(s.Variants) < 2 || s.Variants[0].Name != "without")) {
			t.Errorf("scenario %q: want a name, a title, a script or a drive, and (in the demo) a \"without\" variant first", s.Name)
		}
		for _, v := range s.Variants {
			if v.Setup == nil || (v.Check == nil) != (v.Drive != nil) {
				t.Errorf("%s/%s: want Setup, and Check or Drive", s.Name, v.Name)
			}
		}
	}
}

func TestIsDaemon(t *testing.T) {
	for comm, want := range map[string]bool{"systemd-network": true, "sshd": true, "hog": false, "systemd-networkd": false} {
		if isDaemon(comm) != want {
			t.Errorf("isDaemon(%q) != %v", comm, want)
		}
	}
}

// Each selector pod is decided by its own rule, and only by it, under the
// configuration the kubelet scenarios install.
func TestSelectorRulesMatchTheirPods(t *testing.T) {
	shipped, err := os.ReadFile("../../deploy/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(append(shipped, selectorRules()...))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range selectors {
		p := s.Pod
		qos := policy.QoSGuaranteed
		if p.Memory == "" {
			qos = policy.QoSBestEffort
		}
		f := policy.Facts{Runtime: "containerd", Namespace: p.Namespace, Pod: p.Name + "-node",
			Container: cmp.Or(p.Container, "main"), Image: cmp.Or(p.Image, WorkloadImage),
			Labels: p.Labels, Annotations: p.Annotations, Args: p.Command, QoS: qos}
		d := cfg.Policy().Decide(&f)
		if d.Rule != p.Name || d.OOMScoreAdj == nil || strconv.Itoa(*d.OOMScoreAdj) != selectorScore(i) {
			t.Errorf("%s: rule %q, score %v; want its own rule and %s", p.Name, d.Rule, d.OOMScoreAdj, selectorScore(i))
		}
	}
}
