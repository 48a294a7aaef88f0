package install

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/changes"
	"github.com/oomguard/oomguard/internal/safeio"
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
	// Restart restarts the runtimes whose configuration changed, or that
	// have not read it since (the node's systemd); nil leaves that to the
	// operator, as install says.
	Restart Restarter
	// ProcRoot holds the /proc that shows the node's processes (the
	// runtime's: has it started since its configuration changed?); ""
	// looks nowhere.
	ProcRoot string
	// StateFile, when set, gets what is left to do: the runtimes still to
	// restart (the plugin waits for them, or restarts them).
	StateFile string
}

// Restarter restarts a runtime's systemd unit on the node under root and
// returns its job once it ended; a job that did not succeed is an error
// with the job, one that never started an error without it.
type Restarter func(root, unit string) (job string, err error)

// NRI puts the plugin where the runtime launches it, with its configuration,
// and enables NRI with drop-in files. It is one transaction: a step that
// fails undoes the steps before it.
func NRI(o NRIOptions, out io.Writer) (err error) {
	w, err := changes.Open(o.Root, NRIManifest, o.DryRun, out)
	if err != nil {
		return err
	}
	defer func() {
		if rerr := w.Rollback(); err == nil {
			err = rerr
		}
	}()
	cfg := config.Default()
	if h, herr := w.Host(o.ConfigPath); herr != nil {
		return herr
	} else if c, err := config.Load(h); err == nil {
		cfg = c
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: fix the configuration first", err)
	} else if !o.NRIOnly {
		fmt.Fprintf(out, "note: %s does not exist yet; install it (deploy/config.toml) before the runtime starts the plugin\n", o.ConfigPath)
	}
	if o.Socket != "" {
		cfg.NRI.Socket = o.Socket
	}
	useContainerd, useCRIO, err := runtimes(w, o.Runtime, cfg)
	if err != nil {
		return err
	}
	if o.NRIOnly {
		on, err := alreadyOn(w, cfg, useContainerd, useCRIO)
		if err != nil {
			return err
		}
		if on {
			fmt.Fprintf(out, "unchanged: NRI is on in the running runtime at %s, and its configuration keeps it on: no restart needed\n", cfg.NRI.Socket)
			if err := w.Commit(); err != nil {
				return err
			}
			return o.writeState(State{Socket: cfg.NRI.Socket})
		}
	} else if err := plugin(w, cfg, o.Binary, o.ConfigPath); err != nil {
		return err
	}
	if useContainerd {
		if err := containerd(w, cfg, o.ContainerdConfigVersion); err != nil {
			return err
		}
	}
	if useCRIO {
		if err := crio(w, cfg); err != nil {
			return err
		}
	}
	if err := w.Commit(); err != nil {
		return err
	}
	us := units(useContainerd, useCRIO)
	pending, err := pendingRestarts(w, o.ProcRoot, us)
	if err != nil {
		return err
	}
	if err := apply(w, o.Root, us, pending, o.Restart); err != nil {
		return err
	}
	if o.StateFile == "" {
		return nil
	}
	if pending, err = pendingRestarts(w, o.ProcRoot, us); err != nil {
		return err
	}
	return o.writeState(State{Socket: cfg.NRI.Socket, Pending: pending})
}

func (o NRIOptions) writeState(s State) error {
	if o.StateFile == "" || o.DryRun {
		return nil
	}
	if err := WriteState(o.StateFile, s); err != nil {
		return fmt.Errorf("write what is left to do for the plugin: %w", err)
	}
	return nil
}

// runtimes says which runtimes install configures: those asked for, or
// (auto) those whose configuration the node has. A containerd that k3s or
// RKE2 runs is refused: they write its configuration at every start.
func runtimes(w *changes.Set, runtime string, cfg *config.Config) (useContainerd, useCRIO bool, err error) {
	switch runtime {
	case "auto", "":
		useContainerd, useCRIO = present(w, "/etc/containerd"), present(w, "/etc/crio")
	case "containerd":
		useContainerd = true
	case "crio":
		useCRIO = true
	case "both":
		useContainerd, useCRIO = true, true
	default:
		return false, false, fmt.Errorf("--runtime %q: want auto, containerd, crio or both", runtime)
	}
	if runtime != "crio" {
		if err := generatedConfig(w, cfg); err != nil {
			return false, false, err
		}
	}
	if !useContainerd && !useCRIO {
		return false, false, errors.New("found neither /etc/containerd nor /etc/crio with anything in them: pass --runtime containerd or --runtime crio")
	}
	return useContainerd, useCRIO, nil
}

// present reports whether a runtime's configuration directory holds
// anything: an empty one (left by something removed) is no runtime.
func present(w *changes.Set, dir string) bool {
	h, err := w.Host(dir)
	if err != nil {
		return false
	}
	ents, err := os.ReadDir(h)
	return err == nil && len(ents) > 0
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
	w, err := undoWith(root, NRIManifest, dryRun, out, keepImports)
	if err != nil {
		return err
	}
	return apply(w, root, units(present(w, "/etc/containerd"), present(w, "/etc/crio")), nil, restart)
}

// undo undoes what the record at record lists.
func undo(root, record string, dryRun bool, out io.Writer) (*changes.Set, error) {
	return undoWith(root, record, dryRun, out, nil)
}

// undoWith is undo, with keep first taking out of the record what must stay.
func undoWith(root, record string, dryRun bool, out io.Writer, keep func(*changes.Set)) (*changes.Set, error) {
	w, err := changes.Open(root, record, dryRun, out)
	if err != nil {
		return nil, err
	}
	if !w.Found() {
		fmt.Fprintln(out, "nothing to uninstall: "+record+" does not exist")
		return w, nil
	}
	if keep != nil {
		keep(w)
	}
	return w, w.Undo()
}

// apply makes the runtimes read what changed, or what one has not read
// yet (pending): nothing when there is none; a restart through systemd when
// allowed; else what to run.
func apply(w *changes.Set, root string, units []string, pending []Pending, restart Restarter) error {
	out := w.Out()
	if !w.Changed() {
		if len(pending) == 0 {
			fmt.Fprintln(out, "the runtime's configuration is unchanged: no restart needed")
			return nil
		}
		units = nil
		for _, p := range pending {
			units = append(units, p.Unit)
		}
		fmt.Fprintf(out, "the runtime's configuration is unchanged, but %s has not restarted since oomguard wrote it\n", strings.Join(units, " "))
	}
	switch {
	case w.DryRun():
		fmt.Fprintf(out, "would: restart %s to apply\n", strings.Join(units, " "))
		return nil
	case restart == nil:
		fmt.Fprintf(out, "restart the runtime to apply: systemctl restart %s\n", strings.Join(units, " "))
		return nil
	}
	for _, u := range units {
		job, err := restart(root, u)
		switch {
		case err != nil && job == "":
			return fmt.Errorf("the configuration changed but %s was not restarted: %w", u, err)
		case err != nil:
			return fmt.Errorf("the configuration changed and restarting %s did not succeed: %w; the runtime may be down: fix what its log says, or undo oomguard's change (oomguard-nri uninstall --restart-runtime)", u, err)
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
		if !w.Exists(d + "/config.toml") {
			continue
		}
		return fmt.Errorf("%s/config.toml is generated at every start of k3s or RKE2, which runs its own containerd: a drop-in in /etc/containerd would never be read. "+
			"Copy it to %s/config.toml.tmpl (config-v3.toml.tmpl for containerd 2), append this, and restart k3s or rke2-agent:\n%s",
			d, d, nriSection(cfg, nriPluginID))
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
	bin, err := safeio.ReadFile(binary, maxBinary)
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

// containerdDropInText is the drop-in in the main file's version: containerd
// 1.7 refuses files of two versions, and reads a version-1 file's plugins by
// their short ID, where 2.x migrates a full one.
func containerdDropInText(cfg *config.Config, version int) string {
	s := fmt.Sprintf("# Written by oomguard-nri install: enables NRI and oomguard's plugin.\nversion = %d\n\n%s", version, nriSection(cfg, nriPluginID))
	if version == 1 {
		s += "\n# containerd 1.7 reads a version-1 file's plugins by their short ID.\n" + nriSection(cfg, nriPluginShortID)
	}
	return s
}

func nriSection(cfg *config.Config, id string) string {
	return fmt.Sprintf(`[plugins.%q]
  disable = false
  disable_connections = false
  plugin_config_path = %q
  plugin_path = %q
  socket_path = %q
`, id, PluginConfDir, PluginDir, cfg.NRI.Socket)
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
