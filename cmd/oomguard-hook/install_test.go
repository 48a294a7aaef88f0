package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hooks.d")
	args := []string{"--hooks-dir", dir, "--hook-path", "/usr/local/bin/oomguard-hook", "--config", "/etc/oomguard/config.toml"}
	target := filepath.Join(dir, "oomguard.json")

	var out, errb bytes.Buffer
	if code := run(append([]string{"install", "--dry-run"}, args...), nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "would write "+target) {
		t.Fatalf("dry run: exit %d, %q %q", code, out.String(), errb.String())
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("dry run wrote the file")
	}
	out.Reset()
	if code := run(append([]string{"install"}, args...), nil, &out, &errb); code != 0 || out.String() != "wrote "+target+"\n" {
		t.Fatalf("install: exit %d, %q %q", code, out.String(), errb.String())
	}
	data, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Version string `json:"version"`
		Hook    struct {
			Path    string   `json:"path"`
			Args    []string `json:"args"`
			Timeout int      `json:"timeout"`
		} `json:"hook"`
		When   map[string]any `json:"when"`
		Stages []string       `json:"stages"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if f.Version != "1.0.0" || f.Hook.Path != "/usr/local/bin/oomguard-hook" || f.When["always"] != true || f.Hook.Timeout != 10 ||
		len(f.Stages) != 1 || f.Stages[0] != "createRuntime" ||
		strings.Join(f.Hook.Args, " ") != "oomguard-hook --config /etc/oomguard/config.toml" {
		t.Fatalf("hooks.d file: %s", data)
	}
	out.Reset()
	if code := run(append([]string{"install"}, args...), nil, &out, &errb); code != 0 || out.String() != "unchanged "+target+"\n" {
		t.Fatalf("second install: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := run(append([]string{"print-config"}, args...), nil, &out, &errb); code != 0 || out.String() != string(data) {
		t.Fatalf("print-config differs from the installed file: %q", out.String())
	}
	// A changed stage rewrites the file.
	out.Reset()
	if code := run(append([]string{"install", "--stage", "prestart"}, args...), nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "wrote") {
		t.Fatalf("stage change: exit %d, %q", code, out.String())
	}
	if data, _ := os.ReadFile(target); !strings.Contains(string(data), `"prestart"`) {
		t.Fatalf("stage not written: %s", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestInstallErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"install", "--stage", "poststop"}, 2, `--stage "poststop"`},
		{[]string{"install", "--hook-path", "bin/oomguard-hook"}, 2, "must be absolute"},
		{[]string{"install", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"install", "--hooks-dir", "/proc/oomguard/hooks.d", "--hook-path", "/x"}, 1, "/proc/oomguard/hooks.d"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, nil, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
