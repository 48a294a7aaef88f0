package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	gotoml "github.com/pelletier/go-toml/v2"
	"github.com/sirupsen/logrus"

	"github.com/oomguard/oomguard/internal/install"
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

// The head of `containerd config default` for 1.7 (version 2) and 2.x (version 3).
const containerd17Config = `disabled_plugins = []
imports = []
oom_score = 0
plugin_dir = ""
required_plugins = []
root = "/var/lib/containerd"
state = "/run/containerd"
temp = ""
version = 2

[cgroup]
  path = ""

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.8"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true

  [plugins."io.containerd.nri.v1.nri"]
    disable = true
    disable_connections = false
    plugin_config_path = "/etc/nri/conf.d"
    plugin_path = "/opt/nri/plugins"
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "2s"
    socket_path = "/var/run/nri/nri.sock"
`

const containerd2Config = `version = 3
root = '/var/lib/containerd'
state = '/run/containerd'
temp = ''
plugin_dir = ''
disabled_plugins = []
required_plugins = []
oom_score = 0

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins]
  [plugins.'io.containerd.cri.v1.runtime']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'
          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            SystemdCgroup = true

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = '/var/run/nri/nri.sock'
    plugin_path = '/opt/nri/plugins'
    plugin_config_path = '/etc/nri/conf.d'
`

const crioConfig = `[crio]
log_dir = "/var/log/crio/pods"

[crio.runtime]
default_runtime = "runc"

[crio.nri]
enable_nri = false
`

// installRoot makes a node root with the given runtime configs and our binary and config.
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

// containerdLoad merges the main config and its imports as containerd does,
// with containerd's TOML library, and returns the NRI plugin section.
func containerdLoad(t *testing.T, root string) map[string]any {
	t.Helper()
	var main map[string]any
	b, err := os.ReadFile(filepath.Join(root, install.ContainerdConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := gotoml.Unmarshal(b, &main); err != nil {
		t.Fatalf("containerd cannot parse its config: %v\n%s", err, b)
	}
	nri := map[string]any{}
	if plugins, ok := main["plugins"].(map[string]any); ok {
		if n, ok := plugins["io.containerd.nri.v1.nri"].(map[string]any); ok {
			nri = n
		}
	}
	imports, _ := main["imports"].([]any)
	for _, imp := range imports {
		p := imp.(string)
		if !filepath.IsAbs(p) { // containerd reads relative imports beside its config
			p = filepath.Join(filepath.Dir(install.ContainerdConfig), p)
		}
		matches, _ := filepath.Glob(filepath.Join(root, p))
		for _, m := range matches {
			var sub map[string]any
			sb, _ := os.ReadFile(m)
			if err := gotoml.Unmarshal(sb, &sub); err != nil {
				t.Fatalf("containerd cannot parse %s: %v", m, err)
			}
			if sub["version"] != main["version"] {
				t.Fatalf("%s has version %v, the main config %v", m, sub["version"], main["version"])
			}
			for k, v := range sub["plugins"].(map[string]any)["io.containerd.nri.v1.nri"].(map[string]any) {
				nri[k] = v
			}
		}
	}
	return nri
}

func TestInstallContainerd(t *testing.T) {
	for _, tc := range []struct{ name, config string }{{"1.7", containerd17Config}, {"2.x", containerd2Config}} {
		t.Run(tc.name, func(t *testing.T) {
			root, bin := installRoot(t, map[string]string{
				install.ContainerdConfig:       tc.config,
				"/etc/oomguard/config.toml":    readShipped(t),
				"/etc/containerd/other.toml.x": "",
			})
			args := []string{"install", "--root", root, "--binary", bin}
			if tc.name == "1.7" {
				// imports = [] is present but empty: the config is still ours to extend.
				args = append(args, "--runtime", "containerd")
			}
			out, code := runInstall(t, append(args[:1:1], append([]string{"--dry-run"}, args[1:]...)...)...)
			if code != 0 || !strings.Contains(out, "would:") {
				t.Fatalf("dry run: %d %s", code, out)
			}
			if b, _ := os.ReadFile(filepath.Join(root, install.ContainerdConfig)); string(b) != tc.config {
				t.Fatal("dry run changed the config")
			}
			out, code = runInstall(t, args...)
			if code != 0 {
				t.Fatalf("install: %d %s", code, out)
			}
			nri := containerdLoad(t, root)
			if nri["disable"] != false || nri["plugin_path"] != "/opt/nri/plugins" || nri["socket_path"] != "/var/run/nri/nri.sock" {
				t.Fatalf("NRI after install: %v", nri)
			}
			if b, _ := os.ReadFile(filepath.Join(root, install.ContainerdConfig+install.ContainerdBackupEx)); string(b) != tc.config {
				t.Fatal("no backup of the original config")
			}
			if b, _ := os.ReadFile(filepath.Join(root, "/opt/nri/plugins/10-oomguard")); string(b) != "#!binary" {
				t.Fatal("plugin binary not installed")
			}
			if l, _ := os.Readlink(filepath.Join(root, "/etc/nri/conf.d/10-oomguard.conf")); l != "/etc/oomguard/config.toml" {
				t.Fatalf("plugin config link %q", l)
			}
			out, code = runInstall(t, args...)
			if code != 0 || strings.Contains(out, "wrote") || strings.Contains(out, "added") || strings.Contains(out, "linked") {
				t.Fatalf("second install changed something: %s", out)
			}
			out, code = runInstall(t, "uninstall", "--root", root)
			if code != 0 {
				t.Fatalf("uninstall: %d %s", code, out)
			}
			if b, _ := os.ReadFile(filepath.Join(root, install.ContainerdConfig)); string(b) != tc.config {
				t.Fatalf("uninstall did not restore the config:\n%s", b)
			}
			for _, f := range []string{"/opt/nri/plugins/10-oomguard", install.ContainerdDropIn, install.NRIManifest, install.ContainerdConfig + install.ContainerdBackupEx} {
				if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
					t.Errorf("%s left after uninstall", f)
				}
			}
		})
	}
}

func TestInstallNRIOnly(t *testing.T) {
	root, bin := installRoot(t, map[string]string{install.ContainerdConfig: containerd2Config})
	if out, code := runInstall(t, "install", "--root", root, "--binary", bin, "--nri-only"); code != 0 {
		t.Fatalf("install: %d %s", code, out)
	}
	if nri := containerdLoad(t, root); nri["disable"] != false {
		t.Fatalf("NRI: %v", nri)
	}
	if _, err := os.Stat(filepath.Join(root, "/opt/nri/plugins/10-oomguard")); err == nil {
		t.Fatal("--nri-only installed the plugin binary")
	}
}

// The DaemonSet's init container: the socket from its values, a restart
// only when the runtime's configuration changed, and never one without
// systemd to ask (the plugin then waits for the operator's).
func TestInstallRestartOnlyOnChange(t *testing.T) {
	root, bin := installRoot(t, map[string]string{install.ContainerdConfig: containerd2Config})
	args := []string{"install", "--root", root, "--binary", bin, "--nri-only", "--socket", "/run/nri/other.sock"}
	out, code := runInstall(t, args...)
	if code != 0 || !strings.Contains(out, "restart the runtime to apply: systemctl restart containerd.service") || strings.Contains(out, "does not exist yet") {
		t.Fatalf("install: %d %s", code, out)
	}
	if nri := containerdLoad(t, root); nri["socket_path"] != "/run/nri/other.sock" {
		t.Fatalf("NRI: %v", nri)
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
}

// k3s regenerates containerd's configuration at every start: install says
// what to put in the template instead of writing what would be lost.
func TestInstallK3sSaysWhatToAdd(t *testing.T) {
	root, bin := installRoot(t, map[string]string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml": "version = 3\n"})
	out, code := runInstall(t, "install", "--root", root, "--binary", bin, "--nri-only")
	if code != 1 || !strings.Contains(out, "config.toml.tmpl") || !strings.Contains(out, `[plugins."io.containerd.nri.v1.nri"]`) {
		t.Fatalf("k3s: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(root, "/etc/containerd")); err == nil {
		t.Fatal("install wrote a containerd configuration k3s does not read")
	}
}

func TestInstallContainerdWithoutConfig(t *testing.T) {
	root, bin := installRoot(t, map[string]string{"/etc/containerd/.keep": ""})
	out, code := runInstall(t, "install", "--root", root, "--binary", bin, "--containerd-config-version", "3")
	if code != 0 || !strings.Contains(out, "does not exist yet") {
		t.Fatalf("install: %d %s", code, out)
	}
	if nri := containerdLoad(t, root); nri["disable"] != false {
		t.Fatalf("NRI: %v", nri)
	}
	runInstall(t, "uninstall", "--root", root)
	if _, err := os.Stat(filepath.Join(root, install.ContainerdConfig)); err == nil {
		t.Fatal("a config install created must be removed by uninstall")
	}
}

func TestInstallCRIO(t *testing.T) {
	root, bin := installRoot(t, map[string]string{"/etc/crio/crio.conf": crioConfig})
	out, code := runInstall(t, "install", "--root", root, "--binary", bin)
	if code != 0 {
		t.Fatalf("install: %d %s", code, out)
	}
	// CRI-O reads crio.conf, then crio.conf.d in order, with BurntSushi/toml.
	var merged struct {
		Crio struct {
			NRI struct {
				Enable    bool   `toml:"enable_nri"`
				Listen    string `toml:"nri_listen"`
				PluginDir string `toml:"nri_plugin_dir"`
				ConfDir   string `toml:"nri_plugin_config_dir"`
			} `toml:"nri"`
		} `toml:"crio"`
	}
	for _, f := range []string{"/etc/crio/crio.conf", install.CRIODropIn} {
		if _, err := toml.DecodeFile(filepath.Join(root, f), &merged); err != nil {
			t.Fatalf("CRI-O cannot parse %s: %v", f, err)
		}
	}
	if n := merged.Crio.NRI; !n.Enable || n.Listen != "/var/run/nri/nri.sock" || n.PluginDir != "/opt/nri/plugins" || n.ConfDir != "/etc/nri/conf.d" {
		t.Fatalf("CRI-O NRI settings: %+v", n)
	}
	if out, _ := runInstall(t, "install", "--root", root, "--binary", bin); strings.Contains(out, "wrote") {
		t.Fatalf("second install changed something: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "/etc/crio/crio.conf")); string(b) != crioConfig {
		t.Fatal("the main CRI-O config must never be touched")
	}
}

// The main config as EKS's AL2 bootstrap writes it: version 2, importing
// /etc/containerd/config.d/*.toml, which is EKS's documented way to amend it.
const eksAL2Config = `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
imports = ["/etc/containerd/config.d/*.toml"]

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.5"

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
`

// As EKS AL2023's nodeadm renders its template (version 3, no imports): it
// rewrites the file on every boot, which the DaemonSet's install re-applies.
const nodeadmConfig = `version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
sandbox = "localhost/kubernetes/pause"

[plugins."io.containerd.cri.v1.runtime".containerd]
default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "/etc/containerd/base-runtime-spec.json"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
BinaryName = "/usr/sbin/runc"
SystemdCgroup = true
`

func TestInstallNodeShapes(t *testing.T) {
	for _, tc := range []struct {
		name, main, dropIn string
		mainChanged        bool
	}{
		{"EKS AL2 config.d import", eksAL2Config, "/etc/containerd/config.d/10-oomguard-nri.toml", false},
		{"relative import", "version = 2\nimports = [\"conf.d/*.toml\"]\n", install.ContainerdDropIn, false},
		{"EKS AL2023 nodeadm", nodeadmConfig, install.ContainerdDropIn, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, bin := installRoot(t, map[string]string{install.ContainerdConfig: tc.main})
			out, code := runInstall(t, "install", "--root", root, "--binary", bin)
			if code != 0 {
				t.Fatalf("install: %d %s", code, out)
			}
			drop, err := os.ReadFile(filepath.Join(root, tc.dropIn))
			if err != nil || !strings.Contains(string(drop), `[plugins."io.containerd.nri.v1.nri"]`) {
				t.Fatalf("drop-in %s: %v\n%s\n%s", tc.dropIn, err, drop, out)
			}
			main, _ := os.ReadFile(filepath.Join(root, install.ContainerdConfig))
			if changed := string(main) != tc.main; changed != tc.mainChanged {
				t.Fatalf("main config changed=%v, want %v:\n%s", changed, tc.mainChanged, main)
			}
			if nri := containerdLoad(t, root); nri["disable"] != false {
				t.Fatalf("containerd's merged view has NRI %v\n%s", nri, out)
			}
			if out, code := runInstall(t, "uninstall", "--root", root); code != 0 {
				t.Fatalf("uninstall: %s", out)
			}
			if _, err := os.Stat(filepath.Join(root, tc.dropIn)); !os.IsNotExist(err) {
				t.Fatalf("uninstall left %s", tc.dropIn)
			}
			if main, _ := os.ReadFile(filepath.Join(root, install.ContainerdConfig)); string(main) != tc.main {
				t.Fatalf("uninstall did not restore the main config:\n%s", main)
			}
		})
	}
}

func TestInstallErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		args  []string
		want  string
	}{
		{"no runtime", nil, nil, "found neither /etc/containerd nor /etc/crio"},
		{"bad runtime", nil, []string{"--runtime", "docker"}, `--runtime "docker"`},
		{"imports of single files", map[string]string{install.ContainerdConfig: "version = 2\nimports = [\"/etc/containerd/extra.toml\"]\n"}, nil, "add \"/etc/containerd/conf.d/*.toml\" to its imports"},
		{"broken containerd config", map[string]string{install.ContainerdConfig: "version = 2\n[plugins\n"}, nil, "is not TOML containerd can read"},
		{"unsupported version", map[string]string{install.ContainerdConfig: "version = 4\n"}, nil, "version = 4"},
		{"invalid oomguard config", map[string]string{"/etc/crio/crio.conf": "", "/etc/oomguard/config.toml": "strict = maybe"}, nil, "fix the configuration first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, bin := installRoot(t, tc.files)
			out, code := runInstall(t, append([]string{"install", "--root", root, "--binary", bin}, tc.args...)...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output %q; want failure naming %q", code, out, tc.want)
			}
		})
	}
	root, _ := installRoot(t, nil)
	if out, code := runInstall(t, "uninstall", "--root", root); code != 0 || !strings.Contains(out, "nothing to uninstall") {
		t.Fatalf("uninstall of nothing: %d %s", code, out)
	}
}

// Nothing install reads may hold it: a FIFO anywhere it looks fails at once.
func TestInstallNeverWaitsOnAFIFO(t *testing.T) {
	for _, p := range []string{install.ContainerdConfig, "/etc/crio/crio.conf.d/99-x.conf", install.NRIManifest, "/etc/containerd/conf.d/10-oomguard-nri.toml"} {
		t.Run(p, func(t *testing.T) {
			root, bin := installRoot(t, map[string]string{"/etc/crio/crio.conf": "", "/etc/containerd/.keep": ""})
			os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
			if err := syscall.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan string, 1)
			go func() {
				out, _ := runInstall(t, "install", "--root", root, "--binary", bin, "--runtime", "both")
				done <- out
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

// Uninstall removes the directories install created: a leftover /etc/crio
// would make the next automatic install configure CRI-O on a node that runs
// containerd alone. An empty one left by something else is no runtime either.
func TestUninstallLeavesNoDirectories(t *testing.T) {
	root, bin := installRoot(t, map[string]string{install.ContainerdConfig: containerd17Config})
	if out, code := runInstall(t, "install", "--root", root, "--binary", bin, "--runtime", "both"); code != 0 {
		t.Fatalf("install: %d %s", code, out)
	}
	if out, code := runInstall(t, "uninstall", "--root", root); code != 0 {
		t.Fatalf("uninstall: %d %s", code, out)
	}
	for _, d := range []string{"/etc/crio", "/etc/containerd/conf.d", "/etc/nri", "/opt/nri", "/etc/oomguard"} {
		if _, err := os.Stat(filepath.Join(root, d)); err == nil {
			t.Errorf("uninstall left %s", d)
		}
	}
	os.MkdirAll(filepath.Join(root, "/etc/crio"), 0o755) // empty, someone else's
	out, code := runInstall(t, "install", "--root", root, "--binary", bin)
	if code != 0 || strings.Contains(out, "crio") {
		t.Fatalf("auto install on a containerd node: %d %s", code, out)
	}
}

// Another tool's drop-in (the NVIDIA toolkit's) added after install is
// loaded through the imports install added: uninstall keeps them, and the
// other drop-in stays loaded; NRI goes off with oomguard's drop-in.
func TestUninstallKeepsImportsOthersUse(t *testing.T) {
	for _, tc := range []struct{ name, config string }{{"2.x", containerd2Config}, {"without a config", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"/etc/containerd/.keep": ""}
			args := []string{"install", "--root", "", "--binary", ""}
			if tc.config != "" {
				files[install.ContainerdConfig] = tc.config
			} else {
				args = append(args, "--containerd-config-version", "3")
			}
			root, bin := installRoot(t, files)
			args[2], args[4] = root, bin
			if out, code := runInstall(t, args...); code != 0 {
				t.Fatalf("install: %d %s", code, out)
			}
			nvidia := filepath.Join(root, "/etc/containerd/conf.d/99-nvidia.toml")
			if err := os.WriteFile(nvidia, []byte("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n  runtime_type = 'io.containerd.runc.v2'\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, code := runInstall(t, "uninstall", "--root", root)
			if code != 0 || !strings.Contains(out, "kept "+install.ContainerdConfig+": its imports load /etc/containerd/conf.d/99-nvidia.toml") {
				t.Fatalf("uninstall: %d %s", code, out)
			}
			if _, err := os.Stat(nvidia); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(root, install.ContainerdDropIn)); err == nil {
				t.Fatal("oomguard's drop-in left after uninstall")
			}
			b, err := os.ReadFile(filepath.Join(root, install.ContainerdConfig))
			if err != nil || !strings.Contains(string(b), "/etc/containerd/conf.d/*.toml") {
				t.Fatalf("the imports the NVIDIA drop-in needs are gone: %v\n%s", err, b)
			}
		})
	}
}

// A runtime that serves NRI already (containerd >= 2.0 and CRI-O >= 1.30 by
// default) needs nothing: install --nri-only writes nothing and asks for no
// restart, unless a file of its configuration would turn NRI off or move
// its socket at the next start; a socket nothing listens on is no runtime's.
func TestInstallNRIAlreadyOn(t *testing.T) {
	const c2 = "version = 3\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n"
	for name, tc := range map[string]struct {
		files   map[string]string
		live    bool // something listens on the socket
		stale   bool // a socket file nothing listens on
		unknown bool // want the usual install
	}{
		"containerd 2.x by default":    {files: map[string]string{install.ContainerdConfig: c2}, live: true},
		"containerd without a file":    {files: map[string]string{"/etc/containerd/.keep": ""}, live: true},
		"containerd, NRI not serving":  {files: map[string]string{install.ContainerdConfig: c2}, unknown: true},
		"containerd, a stale socket":   {files: map[string]string{install.ContainerdConfig: c2}, stale: true, unknown: true},
		"containerd, NRI on by a file": {files: map[string]string{install.ContainerdConfig: c2 + "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n"}, live: true},
		"containerd, off at the next start": {files: map[string]string{install.ContainerdConfig: "imports = [\"/etc/containerd/conf.d/*.toml\"]\n" + c2,
			"/etc/containerd/conf.d/05-off.toml": "version = 3\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n"}, live: true, unknown: true},
		"containerd, socket elsewhere": {files: map[string]string{install.ContainerdConfig: c2 + "[plugins.\"io.containerd.nri.v1.nri\"]\n  socket_path = \"/run/other.sock\"\n"}, live: true, unknown: true},
		"CRI-O by default":             {files: map[string]string{install.CRIOConfig: "[crio.runtime]\ndefault_runtime = \"runc\"\n"}, live: true},
		"CRI-O, off by a drop-in": {files: map[string]string{install.CRIOConfig: "[crio.nri]\nenable_nri = true\n",
			"/etc/crio/crio.conf.d/05-off.conf": "[crio.nri]\nenable_nri = false\n"}, live: true, unknown: true},
		"CRI-O, listening elsewhere": {files: map[string]string{install.CRIOConfig: "[crio.nri]\nnri_listen = \"/run/other.sock\"\n"}, live: true, unknown: true},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			for p, content := range tc.files {
				os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
				os.WriteFile(filepath.Join(root, p), []byte(content), 0o644)
			}
			sock := filepath.Join(root, "var/run/nri/nri.sock")
			os.MkdirAll(filepath.Dir(sock), 0o755)
			if tc.live || tc.stale {
				l, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				if tc.stale {
					l.(*net.UnixListener).SetUnlinkOnClose(false)
					l.Close()
				} else {
					defer l.Close()
				}
			}
			before := snapshotTree(t, root)
			out, code := runInstall(t, "install", "--nri-only", "--root", root)
			if code != 0 {
				t.Fatalf("install: %d %s", code, out)
			}
			on := strings.Contains(out, "unchanged: NRI is on in the running runtime at /var/run/nri/nri.sock") && !strings.Contains(out, "restart the runtime")
			if on == tc.unknown {
				t.Fatalf("NRI on already: %v, want %v:\n%s", on, !tc.unknown, out)
			}
			if after := snapshotTree(t, root); on && after != before {
				t.Fatalf("changed the node:\nbefore %s\nafter %s", before, after)
			}
		})
	}
}

// snapshotTree lists every path below root with its content.
func snapshotTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, "%s=%q\n", strings.TrimPrefix(p, root), c)
		} else if err == nil {
			fmt.Fprintf(&b, "%s %v\n", strings.TrimPrefix(p, root), d.Type())
		}
		return nil
	})
	return b.String()
}

// What install leaves for the plugin: the runtime that has not read
// oomguard's drop-in (its process started before the file), and, on a run
// that changes nothing (the pod made again), still that runtime, until it
// runs again as another process.
func TestInstallStateOfTheRuntime(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/containerd"), 0o755)
	os.WriteFile(filepath.Join(root, install.ContainerdConfig), []byte(containerd2Config), 0o644)
	boot := time.Now().Add(-time.Hour).Truncate(time.Second)
	proc := func(pid int, startedAfterBoot time.Duration) {
		d := filepath.Join(root, "proc", strconv.Itoa(pid))
		os.MkdirAll(d, 0o755)
		ticks := int64(startedAfterBoot / (time.Second / 100))
		os.WriteFile(filepath.Join(d, "stat"), fmt.Appendf(nil, "%d (containerd) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 1 1\n", pid, ticks), 0o644)
	}
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/stat"), fmt.Appendf(nil, "cpu 1 2\nbtime %d\n", boot.Unix()), 0o644)
	proc(77, time.Minute) // started 59 minutes ago
	state := filepath.Join(t.TempDir(), "state.json")
	read := func() install.State {
		t.Helper()
		s, err := install.ReadState(state)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	args := []string{"install", "--nri-only", "--root", root, "--state", state}
	out, code := runInstall(t, args...)
	if s := read(); code != 0 || len(s.Pending) != 1 || s.Pending[0].Unit != "containerd.service" || s.Pending[0].Process.PID != 77 || s.Socket != "/var/run/nri/nri.sock" {
		t.Fatalf("install: %d %s\nstate %+v", code, out, s)
	}
	if w := read().Waiting(root); len(w) != 1 {
		t.Fatalf("waiting for %+v", w)
	}
	out, code = runInstall(t, args...)
	if s := read(); code != 0 || len(s.Pending) != 1 || !strings.Contains(out, "containerd.service has not restarted since oomguard wrote it") ||
		!strings.Contains(out, "restart the runtime to apply: systemctl restart containerd.service") {
		t.Fatalf("an unchanged node whose runtime has not restarted: %d %s\nstate %+v", code, out, s)
	}
	os.RemoveAll(filepath.Join(root, "proc/77"))
	proc(78, time.Since(boot)+time.Second) // the runtime restarted since
	if w := read().Waiting(root); len(w) != 0 {
		t.Fatalf("the runtime restarted, still waiting for %+v", w)
	}
	out, code = runInstall(t, args...)
	if s := read(); code != 0 || len(s.Pending) != 0 || !strings.Contains(out, "unchanged: no restart needed") {
		t.Fatalf("after the runtime's restart: %d %s\nstate %+v", code, out, s)
	}
}
