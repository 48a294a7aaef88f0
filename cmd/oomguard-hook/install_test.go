package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/install"
)

// node makes a node tree with files and an executable hook at /usr/local/bin.
func node(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/local/bin/oomguard-hook"), []byte("#!binary"), 0o755)
	return root
}

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, nil, &out, &errb)
	return code, out.String(), errb.String()
}

var hookArgs = []string{"--hook-path", "/usr/local/bin/oomguard-hook", "--config", "/etc/oomguard/config.toml"}

func TestInstall(t *testing.T) {
	root := node(t, nil)
	dir := "/etc/containers/oci/hooks.d"
	args := append([]string{"--root", root, "--hooks-dir", dir}, hookArgs...)
	target := filepath.Join(root, dir, "oomguard.json")

	if code, out, errb := runCLI(append([]string{"install", "--dry-run"}, args...)...); code != 0 || !strings.Contains(out, "would: write "+dir+"/oomguard.json") {
		t.Fatalf("dry run: exit %d, %q %q", code, out, errb)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("dry run wrote the file")
	}
	if code, out, errb := runCLI(append([]string{"install"}, args...)...); code != 0 || !strings.Contains(out, "wrote "+dir+"/oomguard.json") {
		t.Fatalf("install: exit %d, %q %q", code, out, errb)
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
	if code, out, _ := runCLI(append([]string{"install"}, args...)...); code != 0 || !strings.Contains(out, "unchanged "+dir+"/oomguard.json") {
		t.Fatalf("second install: exit %d, %q", code, out)
	}
	if code, out, _ := runCLI(append([]string{"print-config"}, args...)...); code != 0 || out != string(data) {
		t.Fatalf("print-config differs from the installed file: %q", out)
	}
	// A changed stage rewrites the file.
	if code, out, _ := runCLI(append([]string{"install", "--stage", "prestart"}, args...)...); code != 0 || !strings.Contains(out, "wrote") {
		t.Fatalf("stage change: exit %d, %q", code, out)
	}
	if data, _ := os.ReadFile(target); !strings.Contains(string(data), `"prestart"`) {
		t.Fatalf("stage not written: %s", data)
	}
	if entries, _ := os.ReadDir(filepath.Dir(target)); len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if code, out, _ := runCLI("uninstall", "--root", root); code != 0 || !strings.Contains(out, "removed "+dir+"/oomguard.json") {
		t.Fatalf("uninstall: exit %d, %q", code, out)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("uninstall left the hooks.d file")
	}
}

// install writes where the node's runtimes read: Debian's podman reads only
// /usr/share/containers/oci/hooks.d, CRI-O its hooks_dir with drop-ins last.
func TestInstallFindsHooksDirs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"Debian's podman (containers-common)", map[string]string{
			"/usr/share/containers/containers.conf": "[engine]\n#hooks_dir = [\"/x\"]\n",
		}, []string{"/usr/share/containers/oci/hooks.d"}},
		{"podman with hooks_dir set in /etc", map[string]string{
			"/usr/share/containers/containers.conf":         "[engine]\nhooks_dir = [\"/usr/share/containers/oci/hooks.d\"]\n",
			"/etc/containers/containers.conf.d/10-ops.conf": "[engine]\nhooks_dir = [\"/opt/hooks.d\", \"/etc/containers/oci/hooks.d\"]\n",
		}, []string{"/opt/hooks.d", "/etc/containers/oci/hooks.d"}},
		{"CRI-O with its default", map[string]string{
			"/etc/crio/crio.conf": "[crio.runtime]\ncgroup_manager = \"systemd\"\n",
		}, []string{"/usr/share/containers/oci/hooks.d"}},
		{"CRI-O with a drop-in", map[string]string{
			"/etc/crio/crio.conf":                 "[crio.runtime]\nhooks_dir = [\"/a\"]\n",
			"/etc/crio/crio.conf.d/20-hooks.conf": "[crio.runtime]\nhooks_dir = [\"/b\"]\n",
			"/etc/crio/crio.conf.d/10-other.conf": "[crio.runtime]\nhooks_dir = [\"/c\"]\n",
			"/etc/crio/crio.conf.d/30-plain.conf": "[crio.runtime]\nconmon = \"/x\"\n",
		}, []string{"/b"}},
		{"CRI-O and podman", map[string]string{
			"/etc/crio/crio.conf":                   "[crio.runtime]\nhooks_dir = [\"/run/crio-hooks\"]\n",
			"/usr/share/containers/containers.conf": "",
		}, []string{"/run/crio-hooks", "/usr/share/containers/oci/hooks.d"}},
		{"neither", nil, []string{"/usr/share/containers/oci/hooks.d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := node(t, tc.files)
			code, out, errb := runCLI(append([]string{"install", "--root", root}, hookArgs...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s %s", code, out, errb)
			}
			var got []string
			filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == "oomguard.json" {
					got = append(got, strings.TrimSuffix(strings.TrimPrefix(p, root), "/oomguard.json"))
				}
				return nil
			})
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Fatalf("wrote into %v, want %v\n%s", got, want, out)
			}
			if code, _, _ := runCLI("uninstall", "--root", root); code != 0 {
				t.Fatal("uninstall failed")
			}
			for _, d := range tc.want {
				if _, err := os.Stat(filepath.Join(root, d, "oomguard.json")); err == nil {
					t.Errorf("%s left after uninstall", d)
				}
			}
		})
	}
}

// uninstall removes exactly what install wrote: a file changed since is left.
// The DaemonSet's hook mode: the init container puts the binary and its
// configuration on the node beside the hooks.d file; uninstall takes all three.
func TestInstallCopiesFromContainer(t *testing.T) {
	root := node(t, map[string]string{"/etc/crio/crio.conf": ""})
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte("strict = false\n"), 0o644)
	args := []string{"install", "--root", root, "--copy", "--hook-path", "/opt/oomguard/bin/oomguard-hook", "--config", cfg}
	if code, out, errs := runCLI(append(args, "--dry-run")...); code != 0 || !strings.Contains(out, "would: write /opt/oomguard/bin/oomguard-hook") {
		t.Fatalf("dry run: %d %s %s", code, out, errs)
	}
	if code, out, errs := runCLI(args...); code != 0 {
		t.Fatalf("install --copy: %d %s %s", code, out, errs)
	}
	exe, _ := os.Executable()
	want, _ := os.ReadFile(exe)
	if got, _ := os.ReadFile(filepath.Join(root, "/opt/oomguard/bin/oomguard-hook")); !bytes.Equal(got, want) {
		t.Fatal("the node's hook is not this binary")
	}
	if got, _ := os.ReadFile(filepath.Join(root, cfg)); string(got) != "strict = false\n" {
		t.Fatalf("the node's configuration: %q", got)
	}
	var doc struct{ Hook struct{ Path string } }
	b, _ := os.ReadFile(filepath.Join(root, "/usr/share/containers/oci/hooks.d/oomguard.json"))
	if json.Unmarshal(b, &doc); doc.Hook.Path != "/opt/oomguard/bin/oomguard-hook" {
		t.Fatalf("hooks.d: %s", b)
	}
	if code, out, errs := runCLI("uninstall", "--root", root); code != 0 {
		t.Fatalf("uninstall: %d %s %s", code, out, errs)
	}
	for _, p := range []string{"/opt/oomguard/bin/oomguard-hook", cfg, "/usr/share/containers/oci/hooks.d/oomguard.json"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("uninstall left %s", p)
		}
	}
	if code, _, errs := runCLI("install", "--copy", "--hook-path", "/opt/x", "--config", cfg); code != 2 || !strings.Contains(errs, "--copy needs --root") {
		t.Fatalf("--copy onto this filesystem: %d %s", code, errs)
	}
}

func TestUninstallLeavesChangedFiles(t *testing.T) {
	root := node(t, nil)
	if code, _, errb := runCLI(append([]string{"install", "--root", root}, hookArgs...)...); code != 0 {
		t.Fatal(errb)
	}
	p := filepath.Join(root, "/usr/share/containers/oci/hooks.d/oomguard.json")
	os.WriteFile(p, []byte(`{"edited":"by an operator"}`), 0o644)
	if code, out, _ := runCLI("uninstall", "--root", root); code != 0 || !strings.Contains(out, "left /usr/share/containers/oci/hooks.d/oomguard.json alone") {
		t.Fatalf("exit %d %q", code, out)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal("uninstall removed a file it did not write")
	}
	if code, out, _ := runCLI("uninstall", "--root", t.TempDir()); code != 0 || !strings.Contains(out, "nothing to uninstall") {
		t.Fatalf("uninstall of nothing: %d %q", code, out)
	}
}

func TestInstallErrors(t *testing.T) {
	root := node(t, nil)
	os.WriteFile(filepath.Join(root, "usr/local/bin/not-exec"), []byte("x"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"install", "--stage", "poststop"}, 2, `--stage "poststop"`},
		{[]string{"install", "--hook-path", "bin/oomguard-hook"}, 2, "must be absolute"},
		{[]string{"install", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"install", "--root", root, "--hook-path", "/usr/local/bin/missing"}, 2, "/usr/local/bin/missing does not exist"},
		{[]string{"install", "--root", root, "--hook-path", "/usr/local/bin/not-exec"}, 2, "is not an executable file"},
		{[]string{"install", "--root", root, "--hook-path", "/usr/local/bin"}, 2, "is not an executable file"},
		{[]string{"install", "--hooks-dir", "/proc/oomguard/hooks.d", "--hook-path", os.Args[0]}, 1, "/proc/oomguard/hooks.d"},
		{[]string{"install", "--root", root, "--hook-path", "/usr/local/bin/oomguard-hook"}, 0, ""},
	} {
		code, _, errb := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(errb, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb, tc.code, tc.want)
		}
	}
}

// Nothing install reads may hold it: a FIFO anywhere it looks fails at once.
func TestInstallNeverWaitsOnAFIFO(t *testing.T) {
	for _, p := range []string{"/etc/crio/crio.conf.d/99-x.conf", "/usr/share/containers/containers.conf", install.HookManifest, install.DefaultHooksDir + "/" + install.HookFileName} {
		t.Run(p, func(t *testing.T) {
			root := node(t, map[string]string{"/etc/crio/crio.conf": ""})
			os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
			if err := syscall.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan string, 1)
			go func() {
				_, out, errs := runCLI(append([]string{"install", "--root", root}, hookArgs...)...)
				done <- out + errs
			}()
			select {
			case out := <-done:
				if !strings.Contains(out, "not a regular file") {
					t.Fatalf("want a refusal naming the FIFO:\n%s", out)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("install waits on a FIFO")
			}
		})
	}
}
