package install

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/changes"
)

// Paths on the node; install writes them below its root.
const (
	PluginDir          = "/opt/nri/plugins"
	PluginConfDir      = "/etc/nri/conf.d"
	ContainerdConfig   = "/etc/containerd/config.toml"
	ContainerdDropIn   = "/etc/containerd/conf.d/10-oomguard-nri.toml"
	containerdImports  = "/etc/containerd/conf.d/*.toml"
	CRIODropIn         = "/etc/crio/crio.conf.d/10-oomguard-nri.conf"
	NRIManifest        = "/etc/oomguard/nri-install.json"
	ContainerdBackupEx = ".oomguard-backup"
)

// NRIOptions say what NRI installs on a node.
type NRIOptions struct {
	Root   string // the node's filesystem root
	DryRun bool
	// Runtime is auto (what /etc/containerd and /etc/crio show), containerd, crio or both.
	Runtime string
	// Binary is the plugin binary to put where the runtime launches plugins; "" is this executable.
	Binary string
	// ConfigPath is the oomguard configuration the plugin reads, as a path on the node.
	ConfigPath string
	// NRIOnly enables NRI without installing the plugin (it runs as a DaemonSet).
	NRIOnly bool
	// ContainerdConfigVersion is the version of a new containerd config.toml:
	// 2 (containerd 1.7) or 3 (2.x); 0 keeps the existing one's.
	ContainerdConfigVersion int
	// Socket is the NRI socket the runtime listens on; "" is the configuration's.
	Socket string
	// Restart restarts the runtimes whose configuration changed with it
	// (the node's systemd); nil leaves that to the operator, as install says.
	Restart Restarter
}

// Restarter restarts a runtime's systemd unit on the node under root, and
// returns its job.
type Restarter func(root, unit string) (job string, err error)

// NRI puts the plugin where the runtime launches it, with its configuration,
// and enables NRI with drop-in files.
func NRI(o NRIOptions, out io.Writer) error {
	w, err := changes.Open(o.Root, NRIManifest, o.DryRun, out)
	if err != nil {
		return err
	}
	cfg := config.Default()
	if c, err := config.Load(w.Host(o.ConfigPath)); err == nil {
		cfg = c
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: fix the configuration first", err)
	} else if !o.NRIOnly {
		fmt.Fprintf(out, "note: %s does not exist yet; install it (deploy/config.toml) before the runtime starts the plugin\n", o.ConfigPath)
	}
	if o.Socket != "" {
		cfg.NRI.Socket = o.Socket
	}
	var useContainerd, useCRIO bool
	switch o.Runtime {
	case "auto", "":
		useContainerd = exists(w.Host("/etc/containerd"))
		useCRIO = exists(w.Host("/etc/crio"))
		if !useContainerd && !useCRIO {
			if err := generatedConfig(w, cfg); err != nil {
				return err
			}
			return errors.New("found neither /etc/containerd nor /etc/crio: pass --runtime containerd or --runtime crio")
		}
	case "containerd":
		useContainerd = true
	case "crio":
		useCRIO = true
	case "both":
		useContainerd, useCRIO = true, true
	default:
		return fmt.Errorf("--runtime %q: want auto, containerd, crio or both", o.Runtime)
	}
	if !o.NRIOnly {
		if err := plugin(w, cfg, o.Binary, o.ConfigPath); err != nil {
			return err
		}
	}
	if useContainerd {
		if err := containerd(w, cfg, o.ContainerdConfigVersion); err != nil {
			return err
		}
	}
	if useCRIO {
		if err := w.WriteFile(CRIODropIn, []byte(crioDropInText(cfg)), 0o644); err != nil {
			return err
		}
	}
	if err := w.Save(); err != nil {
		return err
	}
	return apply(w, o.Root, units(useContainerd, useCRIO), o.Restart)
}

// units are the systemd units of the runtimes named.
func units(containerd, crio bool) []string {
	var u []string
	if containerd {
		u = append(u, "containerd.service")
	}
	if crio {
		u = append(u, "crio.service")
	}
	return u
}

// UninstallNRI undoes what NRI recorded in its manifest, and restarts the
// runtimes when asked and something changed.
func UninstallNRI(root string, dryRun bool, restart Restarter, out io.Writer) error {
	w, err := undo(root, NRIManifest, dryRun, out)
	if err != nil {
		return err
	}
	return apply(w, root, units(exists(w.Host("/etc/containerd")), exists(w.Host("/etc/crio"))), restart)
}

// undo undoes what the record at record lists.
func undo(root, record string, dryRun bool, out io.Writer) (*changes.Set, error) {
	w, err := changes.Open(root, record, dryRun, out)
	if err != nil {
		return nil, err
	}
	if !w.Found() {
		fmt.Fprintln(out, "nothing to uninstall: "+record+" does not exist")
		return w, nil
	}
	return w, w.Undo()
}

// apply makes the runtimes read what changed: nothing when nothing did; a
// restart through systemd when allowed; else what to run.
func apply(w *changes.Set, root string, units []string, restart Restarter) error {
	out := w.Out()
	switch {
	case !w.Changed():
		fmt.Fprintln(out, "the runtime's configuration is unchanged: no restart needed")
		return nil
	case w.DryRun():
		fmt.Fprintf(out, "would: restart %s to apply\n", strings.Join(units, " "))
		return nil
	case restart == nil:
		fmt.Fprintf(out, "restart the runtime to apply: systemctl restart %s\n", strings.Join(units, " "))
		return nil
	}
	for _, u := range units {
		job, err := restart(root, u)
		if err != nil {
			return fmt.Errorf("the configuration changed but %s was not restarted: %w", u, err)
		}
		fmt.Fprintf(out, "restarted %s (systemd job %s)\n", u, job)
	}
	return nil
}

// k3s and RKE2 write containerd's configuration at every start, from a
// template beside it when there is one.
var generatedContainerd = []string{"/var/lib/rancher/k3s/agent/etc/containerd", "/var/lib/rancher/rke2/agent/etc/containerd"}

// generatedConfig refuses a node whose containerd configuration its
// distribution regenerates, saying what to add where.
func generatedConfig(w *changes.Set, cfg *config.Config) error {
	for _, d := range generatedContainerd {
		if !exists(w.Host(d + "/config.toml")) {
			continue
		}
		return fmt.Errorf("%s/config.toml is generated at every start of k3s or RKE2, so a drop-in would not last: "+
			"copy it to %s/config.toml.tmpl (config-v3.toml.tmpl for containerd 2), append this, and restart k3s or rke2-agent:\n%s",
			d, d, nriSection(cfg))
	}
	return nil
}

// plugin puts the binary where the runtime launches plugins, with its config.
func plugin(w *changes.Set, cfg *config.Config, binary, cfgPath string) error {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary (%w): pass --binary", err)
		}
		binary = exe
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("read the plugin binary: %w", err)
	}
	if err := w.WriteFile(path.Join(PluginDir, cfg.NRI.PluginIndex+"-"+cfg.NRI.PluginName), bin, 0o755); err != nil {
		return err
	}
	// The runtime passes this file to the plugin at Configure: a link keeps
	// one configuration for the plugin, the hook and the doctor.
	return w.Symlink(path.Join(PluginConfDir, cfg.NRI.PluginIndex+"-"+cfg.NRI.PluginName+".conf"), cfgPath)
}

func containerdDropInText(cfg *config.Config, version int) string {
	return fmt.Sprintf("# Written by oomguard-nri install: enables NRI and oomguard's plugin.\nversion = %d\n\n%s", version, nriSection(cfg))
}

func nriSection(cfg *config.Config) string {
	return fmt.Sprintf(`[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  plugin_config_path = %q
  plugin_path = %q
  socket_path = %q
`, PluginConfDir, PluginDir, cfg.NRI.Socket)
}

func crioDropInText(cfg *config.Config) string {
	return fmt.Sprintf(`# Written by oomguard-nri install: enables NRI and oomguard's plugin.
[crio.nri]
enable_nri = true
nri_listen = %q
nri_plugin_dir = %q
nri_plugin_config_dir = %q
`, cfg.NRI.Socket, PluginDir, PluginConfDir)
}

// importedDropIn is where oomguard's drop-in goes so that one of containerd's
// imports reads it: oomguard's own path if an import covers it, else a file
// named as oomguard's in the directory of the first import that is a glob
// matching it. Relative imports are containerd's config directory's.
func importedDropIn(imports []string) (dropIn, imp string) {
	abs := make([]string, len(imports))
	for i, imp := range imports {
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(ContainerdConfig), imp)
		}
		abs[i] = imp
	}
	for _, imp := range abs {
		if ok, _ := filepath.Match(imp, ContainerdDropIn); ok {
			return ContainerdDropIn, imp
		}
	}
	name := strings.TrimSuffix(filepath.Base(ContainerdDropIn), ".toml")
	for _, imp := range abs {
		dir, pattern := filepath.Split(imp)
		if !strings.ContainsAny(pattern, "*?[") || strings.ContainsAny(dir, "*?[") {
			continue
		}
		for _, ext := range []string{".toml", ".conf", ""} {
			if ok, _ := filepath.Match(imp, dir+name+ext); ok {
				return dir + name + ext, imp
			}
		}
	}
	return "", ""
}

// Compiled when used: oomguard-hook links this package and starts once per container.
var (
	versionLine  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^version\s*=\s*(\d+)\s*$`) })
	emptyImports = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^imports\s*=\s*\[\s*\]\s*$`) })
)

// containerd writes the NRI drop-in and makes the main config import it:
// the main file is only touched when it has no imports at all, after a backup.
func containerd(w *changes.Set, cfg *config.Config, wantVersion int) error {
	mainPath := w.Host(ContainerdConfig)
	main, err := os.ReadFile(mainPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", ContainerdConfig, err)
	}
	version := wantVersion
	if m := versionLine().FindSubmatch(main); m != nil {
		fmt.Sscan(string(m[1]), &version)
	}
	if version == 0 {
		version = 2
	}
	if version != 2 && version != 3 {
		return fmt.Errorf("%s has version = %d: oomguard supports containerd 1.7 (version 2) and 2.x (version 3)", ContainerdConfig, version)
	}
	var parsed struct {
		Imports []string `toml:"imports"`
	}
	if _, err := toml.Decode(string(main), &parsed); err != nil {
		return fmt.Errorf("%s is not valid TOML (%v): fix it first", ContainerdConfig, err)
	}
	if len(parsed.Imports) > 0 {
		// EKS's AL2 bootstrap imports /etc/containerd/config.d/*.toml: the
		// drop-in goes where an import already reads, the main file untouched.
		dropIn, imp := importedDropIn(parsed.Imports)
		if dropIn == "" {
			return fmt.Errorf("%s has imports %q, none a directory glob a drop-in can join: add %q to its imports list and run install again",
				ContainerdConfig, parsed.Imports, containerdImports)
		}
		if err := w.WriteFile(dropIn, []byte(containerdDropInText(cfg, version)), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(w.Out(), "unchanged %s (imports %s)\n", ContainerdConfig, imp)
		return nil
	}
	if err := w.WriteFile(ContainerdDropIn, []byte(containerdDropInText(cfg, version)), 0o644); err != nil {
		return err
	}
	line := fmt.Sprintf("imports = [%q]\n", containerdImports)
	var updated []byte
	switch loc := versionLine().FindIndex(main); {
	case emptyImports().Match(main): // `containerd config default` writes imports = []
		updated = emptyImports().ReplaceAll(main, []byte(strings.TrimSuffix(line, "\n")))
	case main == nil:
		updated = []byte(fmt.Sprintf("# Written by oomguard-nri install.\nversion = %d\n%s", version, line))
	case loc != nil:
		updated = append(append(append([]byte{}, main[:loc[1]]...), '\n'), append([]byte(line), main[loc[1]:]...)...)
	default:
		updated = append([]byte(line), main...)
	}
	return w.Modify(ContainerdConfig, updated, 0o644, ContainerdBackupEx, "added imports to")
}
