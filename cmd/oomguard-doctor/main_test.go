package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/doctor"
	"github.com/oomguard/oomguard/test/nodefixture"
)

func fixture(t *testing.T, procs []nodefixture.Proc, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := nodefixture.Write(root, procs, nodefixture.IncidentFiles(files)); err != nil {
		t.Fatal(err)
	}
	return root
}

func incidentProcs() []nodefixture.Proc { return nodefixture.IncidentProcs() }

// findings runs the command with --json and returns its findings by check.
func findings(t *testing.T, root string, extra ...string) (map[string]doctor.Finding, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"--root", root, "--json", "--sample", "0", "--config", writeDefaultConfig(t)}, extra...), &out, &errb)
	var rep struct {
		Findings []doctor.Finding `json:"findings"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, output %q, stderr %q", code, out.String(), errb.String())
	}
	m := map[string]doctor.Finding{}
	for _, f := range rep.Findings {
		m[f.Check] = f
	}
	return m, code
}

func writeDefaultConfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(p, nil, 0o644)
	return p
}

func TestOutputsAndErrors(t *testing.T) {
	root := fixture(t, incidentProcs(), nil)
	var out, errb bytes.Buffer
	if code := run([]string{"--root", root, "--prometheus", "--sample", "0", "--config", writeDefaultConfig(t)}, &out, &errb); code != 2 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{`oomguard_doctor_severity{check="oom-ranking"} 4`, "oomguard_doctor_daemons_outranking_pods 3", "# TYPE oomguard_doctor_console_dump_seconds gauge"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("prometheus output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	run([]string{"--root", root, "--tree", "--sample", "0", "--config", writeDefaultConfig(t)}, &out, &errb)
	for _, want := range []string{"CRITICAL  oom-ranking", "fix: ", "[1] systemd: 666 (+0)", "    [510] systemd: 2 (-997)  [pod 8f1d2c3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f container 3f4e5d6c7b8a]", "[400] sshd: 666 (+0)  [node daemon]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		// Usage errors exit 2, as in every oomguard command.
		{[]string{"--json", "--prometheus"}, 2, "exclude each other"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--bogus"}, 2, "not defined: -bogus"},
		{[]string{"remediate", "--bogus"}, 2, "not defined: -bogus"},
		{[]string{"--root", filepath.Join(t.TempDir(), "nothing")}, 4, "list processes"},
		{[]string{"--config", "/nonexistent.toml"}, 4, "nonexistent.toml"},
		{[]string{"--interval", "1m"}, 2, "--interval needs --output"},
		{[]string{"--root", root, "--sample", "0", "--prometheus", "--output", "/proc/none/x.prom"}, 4, "/proc/none"},
	} {
		errb.Reset()
		if code := run(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d %q", tc.args, code, errb.String())
		}
	}
	// --output writes the textfile atomically.
	prom := filepath.Join(t.TempDir(), "oomguard.prom")
	if code := run([]string{"--root", root, "--sample", "0", "--prometheus", "--output", prom, "--config", writeDefaultConfig(t)}, &out, &errb); code != 2 {
		t.Fatalf("--output: exit %d %s", code, errb.String())
	}
	if b, _ := os.ReadFile(prom); !strings.Contains(string(b), "oomguard_doctor_severity") {
		t.Fatalf("textfile: %s", b)
	}
	// A tree with processes only: everything else degrades to unknown, no crash.
	bare := t.TempDir()
	os.MkdirAll(filepath.Join(bare, "proc", "1"), 0o755)
	fs, _ := findings(t, bare)
	if len(fs) != 5 || fs["console"].Severity != doctor.Unknown || fs["zombie-memcgs"].Severity != doctor.Unknown || fs["nic-cpu"].Severity != doctor.Unknown {
		t.Fatalf("bare tree: %+v", fs)
	}
	// --daemons replaces the list.
	fs, _ = findings(t, root, "--daemons", "kubelet")
	if fs["oom-ranking"].Severity != doctor.OK {
		t.Fatalf("kubelet alone (at -999) does not outrank the pod: %+v", fs["oom-ranking"])
	}
}

// This machine's real /proc, through the same code.
func TestRealProc(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"--sample", "100ms", "--tree", "--config", writeDefaultConfig(t)}, &out, &errb)
	if code > 2 || !strings.Contains(out.String(), "oom-ranking") || errb.Len() > 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "oomguard-doctor remediate [flags]") ||
			!strings.Contains(out.String(), "--undo") || !strings.Contains(out.String(), "--runtime-endpoint") || errb.Len() > 0 {
			t.Errorf("%q: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
	}
}
