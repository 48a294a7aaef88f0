package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	gotoml "github.com/pelletier/go-toml/v2"
)

// containerdLoad merges the main config and its imports as containerd does,
// with containerd's TOML library, and returns the NRI plugin section.
func containerdLoad(t *testing.T, root string) map[string]any {
	t.Helper()
	var main map[string]any
	b, err := os.ReadFile(filepath.Join(root, ContainerdConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := gotoml.Unmarshal(b, &main); err != nil {
		t.Fatalf("containerd cannot parse its config: %v\n%s", err, b)
	}
	nri := map[string]any{}
	if plugins, ok := main["plugins"].(map[string]any); ok {
		if n, ok := plugins[nriPluginID].(map[string]any); ok {
			nri = n
		}
	}
	imports, _ := main["imports"].([]any)
	for _, imp := range imports {
		p := imp.(string)
		if !filepath.IsAbs(p) { // containerd reads relative imports beside its config
			p = filepath.Join(filepath.Dir(ContainerdConfig), p)
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
			for k, v := range sub["plugins"].(map[string]any)[nriPluginID].(map[string]any) {
				nri[k] = v
			}
		}
	}
	return nri
}

// containerd's own defaults (`containerd config default`): install adds
// NRI, a second install changes nothing, uninstall restores the file.
func TestContainerdDefaults(t *testing.T) {
	for _, shape := range []string{"containerd-1.7-default", "containerd-2-default"} {
		t.Run(shape, func(t *testing.T) {
			root := newNode(t, shape, map[string]nodeFile{
				"/etc/oomguard/config.toml":    {content: shippedConfig(t)},
				"/etc/containerd/other.toml.x": {},
			})
			original := shapeFile(t, shape, ContainerdConfig)
			o := options(root)
			o.Binary = pluginBinary(t)
			if shape == "containerd-1.7-default" {
				// imports = [] is present but empty: the config is still ours to extend.
				o.Runtime = "containerd"
			}
			dry := o
			dry.DryRun = true
			if out, err := runNRI(dry); err != nil || !strings.Contains(out, "would:") {
				t.Fatalf("dry run: %v %s", err, out)
			}
			if b, _ := os.ReadFile(filepath.Join(root, ContainerdConfig)); string(b) != original {
				t.Fatal("dry run changed the config")
			}
			if out, err := runNRI(o); err != nil {
				t.Fatalf("install: %v %s", err, out)
			}
			nri := containerdLoad(t, root)
			if nri["disable"] != false || nri["plugin_path"] != "/opt/nri/plugins" || nri["socket_path"] != "/var/run/nri/nri.sock" {
				t.Fatalf("NRI after install: %v", nri)
			}
			if b, _ := os.ReadFile(filepath.Join(root, ContainerdConfig+ContainerdBackupEx)); string(b) != original {
				t.Fatal("no backup of the original config")
			}
			if b, _ := os.ReadFile(filepath.Join(root, "/opt/nri/plugins/10-oomguard")); string(b) != "#!binary" {
				t.Fatal("plugin binary not installed")
			}
			if l, _ := os.Readlink(filepath.Join(root, "/etc/nri/conf.d/10-oomguard.conf")); l != "/etc/oomguard/config.toml" {
				t.Fatalf("plugin config link %q", l)
			}
			out, err := runNRI(o)
			if err != nil || strings.Contains(out, "wrote") || strings.Contains(out, "added") || strings.Contains(out, "linked") {
				t.Fatalf("second install changed something: %s", out)
			}
			if out, err := runUninstall(root, false, nil); err != nil {
				t.Fatalf("uninstall: %v %s", err, out)
			}
			if b, _ := os.ReadFile(filepath.Join(root, ContainerdConfig)); string(b) != original {
				t.Fatalf("uninstall did not restore the config:\n%s", b)
			}
			for _, f := range []string{"/opt/nri/plugins/10-oomguard", ContainerdDropIn, NRIManifest, ContainerdConfig + ContainerdBackupEx} {
				if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
					t.Errorf("%s left after uninstall", f)
				}
			}
		})
	}
}

// Where the distribution's main file imports a directory already, the
// drop-in goes there and the main file stays; else install adds the import.
func TestContainerdNodeShapes(t *testing.T) {
	for _, tc := range []struct {
		name, shape, dropIn string
		files               map[string]nodeFile
		mainChanged         bool
	}{
		{"EKS AL2 config.d import", "eks-al2", "/etc/containerd/config.d/10-oomguard-nri.toml", nil, false},
		{"relative import", "", ContainerdDropIn, map[string]nodeFile{ContainerdConfig: {content: "version = 2\nimports = [\"conf.d/*.toml\"]\n"}}, false},
		{"EKS AL2023 nodeadm", "eks-al2023-nodeadm", ContainerdDropIn, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newNode(t, tc.shape, tc.files)
			main0, _ := os.ReadFile(filepath.Join(root, ContainerdConfig))
			o := options(root)
			o.Binary = pluginBinary(t)
			out, err := runNRI(o)
			if err != nil {
				t.Fatalf("install: %v %s", err, out)
			}
			drop, err := os.ReadFile(filepath.Join(root, tc.dropIn))
			if err != nil || !strings.Contains(string(drop), `[plugins."io.containerd.nri.v1.nri"]`) {
				t.Fatalf("drop-in %s: %v\n%s\n%s", tc.dropIn, err, drop, out)
			}
			main, _ := os.ReadFile(filepath.Join(root, ContainerdConfig))
			if changed := string(main) != string(main0); changed != tc.mainChanged {
				t.Fatalf("main config changed=%v, want %v:\n%s", changed, tc.mainChanged, main)
			}
			if nri := containerdLoad(t, root); nri["disable"] != false {
				t.Fatalf("containerd's merged view has NRI %v\n%s", nri, out)
			}
			if out, err := runUninstall(root, false, nil); err != nil {
				t.Fatalf("uninstall: %v %s", err, out)
			}
			if _, err := os.Stat(filepath.Join(root, tc.dropIn)); !os.IsNotExist(err) {
				t.Fatalf("uninstall left %s", tc.dropIn)
			}
			if main, _ := os.ReadFile(filepath.Join(root, ContainerdConfig)); string(main) != string(main0) {
				t.Fatalf("uninstall did not restore the main config:\n%s", main)
			}
		})
	}
}

// k3s regenerates containerd's configuration at every start: install says
// what to put in the template instead of writing what would be lost.
func TestContainerdK3sSaysWhatToAdd(t *testing.T) {
	root := newNode(t, "k3s", nil)
	o := options(root)
	o.NRIOnly = true
	out, err := runNRI(o)
	if err == nil || !strings.Contains(err.Error(), "config.toml.tmpl") || !strings.Contains(err.Error(), `[plugins."io.containerd.nri.v1.nri"]`) {
		t.Fatalf("k3s: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "/etc/containerd")); err == nil {
		t.Fatal("install wrote a containerd configuration k3s does not read")
	}
}

func TestContainerdWithoutConfig(t *testing.T) {
	root := newNode(t, "containerd-no-config", nil)
	o := options(root)
	o.Binary, o.ContainerdConfigVersion = pluginBinary(t), 3
	if out, err := runNRI(o); err != nil || !strings.Contains(out, "does not exist yet") {
		t.Fatalf("install: %v %s", err, out)
	}
	if nri := containerdLoad(t, root); nri["disable"] != false {
		t.Fatalf("NRI: %v", nri)
	}
	runUninstall(root, false, nil)
	if _, err := os.Stat(filepath.Join(root, ContainerdConfig)); err == nil {
		t.Fatal("a config install created must be removed by uninstall")
	}
}

// Another tool's drop-in (the NVIDIA toolkit's) added after install is
// loaded through the imports install added: uninstall keeps them, and the
// other drop-in stays loaded; NRI goes off with oomguard's drop-in.
func TestUninstallKeepsImportsOthersUse(t *testing.T) {
	for _, shape := range []string{"containerd-2-default", "containerd-no-config"} {
		t.Run(shape, func(t *testing.T) {
			root := newNode(t, shape, nil)
			o := options(root)
			o.Binary, o.ContainerdConfigVersion = pluginBinary(t), 3
			if out, err := runNRI(o); err != nil {
				t.Fatalf("install: %v %s", err, out)
			}
			nvidia := filepath.Join(root, "/etc/containerd/conf.d/99-nvidia.toml")
			if err := os.WriteFile(nvidia, []byte("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n  runtime_type = 'io.containerd.runc.v2'\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := runUninstall(root, false, nil)
			if err != nil || !strings.Contains(out, "kept "+ContainerdConfig+": its imports load /etc/containerd/conf.d/99-nvidia.toml") {
				t.Fatalf("uninstall: %v %s", err, out)
			}
			if _, err := os.Stat(nvidia); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(root, ContainerdDropIn)); err == nil {
				t.Fatal("oomguard's drop-in left after uninstall")
			}
			b, err := os.ReadFile(filepath.Join(root, ContainerdConfig))
			if err != nil || !strings.Contains(string(b), "/etc/containerd/conf.d/*.toml") {
				t.Fatalf("the imports the NVIDIA drop-in needs are gone: %v\n%s", err, b)
			}
		})
	}
}
