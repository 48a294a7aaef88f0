package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/internal/install"
)

// nodeShape is a file of a node shape of install's testdata: a runtime's
// configuration as it ships, or as a distribution writes it.
func nodeShape(t *testing.T, shape, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../internal/install/testdata/nodes", shape, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// installRoot makes a node root with the given files, and a binary to install.
func installRoot(t *testing.T, files map[string]string) (root, binary string) {
	t.Helper()
	root = t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	binary = filepath.Join(t.TempDir(), "oomguard-nri")
	os.WriteFile(binary, []byte("#!binary"), 0o755)
	return root, binary
}

func runInstall(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String() + errb.String(), code
}

// The commands over internal/install (whose tests hold the node shapes):
// what each says and how it exits.
func TestInstallCommand(t *testing.T) {
	cfg := nodeShape(t, "containerd-2-default", install.ContainerdConfig)
	root, bin := installRoot(t, map[string]string{install.ContainerdConfig: cfg})
	if out, code := runInstall(t, "install", "--dry-run", "--root", root, "--binary", bin); code != 0 || !strings.Contains(out, "would:") {
		t.Fatalf("dry run: %d %s", code, out)
	}
	if out, code := runInstall(t, "install", "--root", root, "--binary", bin); code != 0 || !strings.Contains(out, "restart the runtime to apply") {
		t.Fatalf("install: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "/opt/nri/plugins/10-oomguard")); string(b) != "#!binary" {
		t.Fatal("--binary was not installed")
	}
	if out, code := runInstall(t, "uninstall", "--root", root); code != 0 {
		t.Fatalf("uninstall: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, install.ContainerdConfig)); string(b) != cfg {
		t.Fatal("uninstall did not restore the configuration")
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"install", "--root", root, "--runtime", "docker"}, 1, `oomguard-nri install: --runtime "docker"`},
		{[]string{"install", "--root", t.TempDir()}, 1, "found neither /etc/containerd nor /etc/crio"},
		{[]string{"install", "--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"uninstall", "--root", t.TempDir()}, 0, "nothing to uninstall"},
	} {
		if out, code := runInstall(t, tc.args...); code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

// The DaemonSet's init container: the socket from its values, a restart
// only when the runtime's configuration changed, and never one without
// systemd to ask (the plugin then waits for the operator's).
func TestInstallRestartOnlyOnChange(t *testing.T) {
	root, bin := installRoot(t, map[string]string{install.ContainerdConfig: nodeShape(t, "containerd-2-default", install.ContainerdConfig)})
	args := []string{"install", "--root", root, "--binary", bin, "--nri-only", "--socket", "/run/nri/other.sock"}
	out, code := runInstall(t, args...)
	if code != 0 || !strings.Contains(out, "restart the runtime to apply: systemctl restart containerd.service") || strings.Contains(out, "does not exist yet") {
		t.Fatalf("install: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, install.ContainerdDropIn)); !strings.Contains(string(b), `socket_path = "/run/nri/other.sock"`) {
		t.Fatalf("the drop-in:\n%s", b)
	}
	out, code = runInstall(t, append(args, "--restart-runtime")...)
	if code != 0 || !strings.Contains(out, "unchanged: no restart needed") {
		t.Fatalf("second install restarts or fails: %d %s", code, out)
	}
	os.Remove(filepath.Join(root, install.ContainerdDropIn)) // as nodeadm's rewrite at boot
	out, code = runInstall(t, append(args, "--restart-runtime")...)
	if code != 1 || !strings.Contains(out, "was not restarted: the node does not run systemd") {
		t.Fatalf("a changed node without systemd: %d %s", code, out)
	}
	out, code = runInstall(t, "uninstall", "--root", root, "--dry-run", "--restart-runtime")
	if code != 0 || !strings.Contains(out, "would: restart containerd.service") {
		t.Fatalf("uninstall --dry-run: %d %s", code, out)
	}
	// Without --restart-runtime a dry run says the restart is the operator's.
	out, code = runInstall(t, "uninstall", "--root", root, "--dry-run")
	if code != 0 || strings.Contains(out, "would: restart") || !strings.Contains(out, "would leave the restart to you (no --restart-runtime): systemctl restart containerd.service") {
		t.Fatalf("uninstall --dry-run without --restart-runtime: %d %s", code, out)
	}
}
