package install

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/changes"
	"github.com/oomguard/oomguard/internal/restartstate"
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
	Restart restartstate.Restarter
	// ProcRoot holds the /proc that shows the node's processes (the
	// runtime's: has it started since its configuration changed?); ""
	// looks nowhere.
	ProcRoot string
	// StateFile, when set, gets what is left to do: the runtimes still to
	// restart (the plugin waits for them, or restarts them).
	StateFile string
	// FailClosed turns on the runtime's NRI validator (containerd 2.2,
	// CRI-O 1.34 and later): a container whose pod requires oomguard
	// (required-plugins.noderesource.dev) is refused while it is not connected.
	FailClosed bool
}

// nriRuntime is one runtime's side of NRI: how install finds it on a node,
// whether it serves NRI at oomguard's socket already, and the drop-in that
// switches NRI on.
type nriRuntime interface {
	// name is how --runtime names it; unit its systemd unit; comm its
	// process's name; dir its configuration directory (a node with files
	// there runs it).
	name() string
	unit() string
	comm() string
	dir() string
	// dropIn is where oomguard's drop-in goes when nothing says otherwise.
	dropIn() string
	// refuse says why this node's configuration of the runtime cannot be
	// changed by drop-ins, before anything is written.
	refuse(w *changes.Set, cfg *config.Config) error
	// keepsNRI: no file of its configuration turns NRI off or moves its
	// socket at its next start.
	keepsNRI(w *changes.Set, cfg *config.Config) (bool, error)
	// enable writes the drop-in that switches NRI on, or refuses what it
	// cannot do safely, changing nothing.
	enable(w *changes.Set, cfg *config.Config) error
	// keep, at uninstall, takes out of the record what must stay.
	keep(w *changes.Set)
}

// nriRuntimes are the runtimes install knows, in the order it configures them.
func nriRuntimes(containerdVersion int, failClosed bool) []nriRuntime {
	return []nriRuntime{containerd{newVersion: containerdVersion, failClosed: failClosed}, crio{failClosed: failClosed}}
}

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
	rts, err := selectRuntimes(w, o.Runtime, cfg, nriRuntimes(o.ContainerdConfigVersion, o.FailClosed))
	if err != nil {
		return err
	}
	if o.NRIOnly {
		// Failing closed needs the validator, which no runtime turns on by default.
		on, err := alreadyOn(w, cfg, rts)
		if err != nil {
			return err
		}
		if on && !o.FailClosed {
			fmt.Fprintf(out, "unchanged: NRI is on in the running runtime at %s, and its configuration keeps it on: no restart needed\n", cfg.NRI.Socket)
			if err := w.Commit(); err != nil {
				return err
			}
			return o.writeState(restartstate.State{Socket: cfg.NRI.Socket})
		}
	} else if err := plugin(w, cfg, o.Binary, o.ConfigPath); err != nil {
		return err
	}
	for _, rt := range rts {
		if err := rt.enable(w, cfg); err != nil {
			return err
		}
	}
	if err := w.Commit(); err != nil {
		return err
	}
	pending, err := pendingRestarts(w, o.ProcRoot, rts)
	if err != nil {
		return err
	}
	if err := apply(w, o.Root, units(rts), pending, o.Restart); err != nil {
		return err
	}
	if o.StateFile == "" {
		return nil
	}
	if pending, err = pendingRestarts(w, o.ProcRoot, rts); err != nil {
		return err
	}
	return o.writeState(restartstate.State{Socket: cfg.NRI.Socket, Pending: pending})
}

func (o NRIOptions) writeState(s restartstate.State) error {
	if o.StateFile == "" || o.DryRun {
		return nil
	}
	if err := restartstate.Write(o.StateFile, s); err != nil {
		return fmt.Errorf("write what is left to do for the plugin: %w", err)
	}
	return nil
}

// selectRuntimes says which runtimes install configures: the one asked
// for, every one ("both"), or (auto) those whose configuration the node
// has. Every runtime considered may refuse the node first.
func selectRuntimes(w *changes.Set, name string, cfg *config.Config, all []nriRuntime) ([]nriRuntime, error) {
	var considered []nriRuntime
	switch name {
	case "auto", "", "both":
		considered = all
	default:
		for _, rt := range all {
			if rt.name() == name {
				considered = []nriRuntime{rt}
			}
		}
	}
	if considered == nil {
		return nil, fmt.Errorf("--runtime %q: want auto, containerd, crio or both", name)
	}
	var out []nriRuntime
	for _, rt := range considered {
		if err := rt.refuse(w, cfg); err != nil {
			return nil, err
		}
		if name == "both" || name == rt.name() || present(w, rt.dir()) {
			out = append(out, rt)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("found neither /etc/containerd nor /etc/crio with anything in them: pass --runtime containerd or --runtime crio")
	}
	return out, nil
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

// units are the systemd units of the runtimes.
func units(rts []nriRuntime) []string {
	var u []string
	for _, rt := range rts {
		u = append(u, rt.unit())
	}
	return u
}

// alreadyOn reports whether NRI is on in the node's runtime as it runs and
// as it will start again: the runtime serves NRI at oomguard's socket now
// (containerd >= 2.0 and CRI-O >= 1.30 do by default), and no file of its
// configuration says otherwise (NRI off, or its socket elsewhere). Then
// --nri-only has nothing to write and no restart to ask for. A node with
// both runtimes, or oomguard's drop-in already, goes the usual way.
func alreadyOn(w *changes.Set, cfg *config.Config, rts []nriRuntime) (bool, error) {
	if len(rts) != 1 || !serving(w, cfg.NRI.Socket) {
		return false, nil
	}
	for _, rt := range nriRuntimes(0, false) {
		if w.Exists(rt.dropIn()) {
			return false, nil
		}
	}
	return rts[0].keepsNRI(w, cfg)
}

// serving: something accepts connections on the socket (a stale file does not).
func serving(w *changes.Set, socket string) bool {
	h, err := w.Host(socket)
	if err != nil {
		return false
	}
	// A raw connect: package net would cost oomguard-hook's every run its init.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: h})
	return err == nil || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINPROGRESS) // a full backlog is a server too
}

// UninstallNRI undoes what NRI recorded in its manifest, and restarts the
// runtimes when asked and something changed.
func UninstallNRI(root string, dryRun bool, restart restartstate.Restarter, out io.Writer) error {
	all := nriRuntimes(0, false)
	w, err := undoWith(root, NRIManifest, dryRun, out, func(w *changes.Set) {
		for _, rt := range all {
			rt.keep(w)
		}
	})
	if err != nil {
		return err
	}
	var rts []nriRuntime
	for _, rt := range all {
		if present(w, rt.dir()) {
			rts = append(rts, rt)
		}
	}
	return apply(w, root, units(rts), nil, restart)
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
func apply(w *changes.Set, root string, units []string, pending []restartstate.Pending, restart restartstate.Restarter) error {
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
	case w.DryRun() && restart == nil:
		fmt.Fprintf(out, "would leave the restart to you (no --restart-runtime): systemctl restart %s to apply\n", strings.Join(units, " "))
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
