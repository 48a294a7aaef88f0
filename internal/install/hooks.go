package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/BurntSushi/toml"

	"github.com/oomguard/oomguard/internal/changes"
	"github.com/oomguard/oomguard/internal/safeio"
)

// DefaultHooksDir is where CRI-O and podman read hook definitions unless
// configured otherwise (containers/common's DefaultHooksDirs).
const DefaultHooksDir = "/usr/share/containers/oci/hooks.d"

// HookFileName is the hooks.d file oomguard-hook installs.
const HookFileName = "oomguard.json"

// HookManifest records the hooks.d files install wrote.
const HookManifest = "/etc/oomguard/hook-install.json"

// hooksDFile is the hooks.d schema, version 1.0.0 (containers/common pkg/hooks).
type hooksDFile struct {
	Version string     `json:"version"`
	Hook    hooksDHook `json:"hook"`
	When    hooksDWhen `json:"when"`
	Stages  []string   `json:"stages"`
}

type hooksDHook struct {
	Path    string   `json:"path"`
	Args    []string `json:"args,omitempty"`
	Timeout int      `json:"timeout,omitempty"` // seconds, after which the runtime kills the hook
}

// HookTimeout is the hooks.d timeout: longer than the hook's own deadline
// (hook.DefaultDeadline), so the hook ends first and fails open.
const HookTimeout = 10

type hooksDWhen struct {
	Always bool `json:"always"`
}

// OptionError is an option that cannot work, as opposed to a node that
// cannot be changed; commands exit 2 on it.
type OptionError struct{ Msg string }

func (e *OptionError) Error() string { return e.Msg }

// HookOptions say what the hooks.d file holds and where it goes.
type HookOptions struct {
	Root string // the node's filesystem root
	// Dir is the one hooks.d directory to write to; "" for every directory
	// the node's runtimes read (HooksDirs).
	Dir        string
	HookPath   string // absolute path of oomguard-hook on the node; "" is this executable
	ConfigPath string // the configuration the hook reads
	Stage      string // createRuntime, or prestart for runtimes without it
	DryRun     bool
	// Copy puts this binary at HookPath and this filesystem's ConfigPath at
	// ConfigPath on the node: the DaemonSet's init container installs so.
	Copy bool
}

// HooksDir is a hooks.d directory a runtime reads, and how install knows.
type HooksDir struct {
	Dir, Why string
}

// HooksDirs finds the hooks.d directories the node's runtimes read: CRI-O's
// hooks_dir from crio.conf and its drop-ins, podman's from containers.conf
// and its drop-ins, each runtime's default where its configuration sets none.
func HooksDirs(root string) ([]HooksDir, error) {
	w, err := changes.Open(root, HookManifest, true, io.Discard)
	if err != nil {
		return nil, err
	}
	return hooksDirs(w)
}

func hooksDirs(w *changes.Set) ([]HooksDir, error) {
	var out []HooksDir
	add := func(dirs []string, why string) {
		for _, d := range dirs {
			if !slices.ContainsFunc(out, func(h HooksDir) bool { return h.Dir == d }) {
				out = append(out, HooksDir{d, why})
			}
		}
	}
	if w.Exists("/etc/crio") || w.Exists("/usr/bin/crio") || w.Exists("/usr/local/bin/crio") {
		dirs, from, err := lastSet(w, []string{"/etc/crio/crio.conf"}, "/etc/crio/crio.conf.d", "*", // CRI-O reads every file there
			func(c *runtimeConf) []string { return c.Crio.Runtime.HooksDir })
		if err != nil {
			return nil, err
		}
		if dirs == nil {
			dirs, from = []string{DefaultHooksDir}, "its default"
		}
		add(dirs, "CRI-O's hooks_dir ("+from+")")
	}
	if w.Exists("/usr/share/containers/containers.conf") || w.Exists("/etc/containers") || w.Exists("/usr/bin/podman") {
		dirs, from, err := lastSet(w, []string{"/usr/share/containers/containers.conf", "/etc/containers/containers.conf"},
			"/etc/containers/containers.conf.d", "*.conf", func(c *runtimeConf) []string { return c.Engine.HooksDir })
		if err != nil {
			return nil, err
		}
		if dirs == nil {
			dirs, from = []string{DefaultHooksDir}, "its default"
		}
		add(dirs, "podman's hooks_dir ("+from+")")
	}
	if out == nil {
		add([]string{DefaultHooksDir}, "the default of CRI-O and podman; neither was found")
	}
	return out, nil
}

// runtimeConf is what HooksDirs reads of crio.conf and containers.conf.
type runtimeConf struct {
	Crio struct {
		Runtime struct {
			HooksDir []string `toml:"hooks_dir"`
		} `toml:"runtime"`
	} `toml:"crio"`
	Engine struct {
		HooksDir []string `toml:"hooks_dir"`
	} `toml:"engine"`
}

// lastSet reads files, then the drop-ins of dir in name order, and returns
// the last value get finds set, and the file that set it.
func lastSet(w *changes.Set, files []string, dir, glob string, get func(*runtimeConf) []string) ([]string, string, error) {
	var dropins []string
	if h, err := w.Host(dir); err == nil {
		ents, _ := os.ReadDir(h)
		for _, e := range ents {
			if ok, _ := filepath.Match(glob, e.Name()); ok && !e.IsDir() {
				dropins = append(dropins, filepath.Join(dir, e.Name()))
			}
		}
	}
	sort.Strings(dropins)
	var val []string
	var from string
	for _, p := range append(slices.Clone(files), dropins...) {
		b, err := w.ReadFile(p, changes.MaxFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var c runtimeConf
		if err == nil {
			_, err = toml.Decode(string(b), &c)
		}
		if err != nil {
			return nil, "", fmt.Errorf("read %s: %w", p, err)
		}
		if v := get(&c); v != nil {
			val, from = v, p
		}
	}
	return val, from, nil
}

// HookDocument is the hooks.d JSON for o.
func HookDocument(o HookOptions) ([]byte, error) {
	if o.Stage != "createRuntime" && o.Stage != "prestart" {
		return nil, &OptionError{fmt.Sprintf("--stage %q: want createRuntime or prestart (the container's pid must exist and its process must not have started)", o.Stage)}
	}
	p := o.HookPath
	if p == "" {
		exe, err := os.Executable()
		if err == nil {
			exe, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot find this binary's path (%v): pass --hook-path", err)
		}
		p = exe
	}
	if !filepath.IsAbs(p) {
		return nil, &OptionError{fmt.Sprintf("--hook-path %q must be absolute: runtimes run hooks by absolute path", p)}
	}
	st, err := os.Stat(filepath.Join(o.Root, p))
	if o.Copy { // this binary is, or in a dry run would be, there
		var exe string
		if exe, err = os.Executable(); err == nil {
			st, err = os.Stat(exe)
		}
	}
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		why := "is not an executable file"
		if err != nil {
			why = "does not exist"
		}
		return nil, &OptionError{fmt.Sprintf("--hook-path %s %s on the node: the runtime would fail every container's creation; install oomguard-hook there first", p, why)}
	}
	cfg, err := filepath.Abs(o.ConfigPath)
	if err != nil {
		return nil, err
	}
	f := hooksDFile{
		Version: "1.0.0",
		Hook:    hooksDHook{Path: p, Args: []string{"oomguard-hook", "--config", cfg}, Timeout: HookTimeout},
		When:    hooksDWhen{Always: true},
		Stages:  []string{o.Stage},
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Hook writes the hooks.d file into every directory the node's runtimes
// read (or o.Dir), and records what it wrote; a second run changes nothing.
func Hook(o HookOptions, out io.Writer) (err error) {
	w, err := changes.Open(o.Root, HookManifest, o.DryRun, out)
	if err != nil {
		return err
	}
	defer func() {
		if rerr := w.Rollback(); err == nil {
			err = rerr
		}
	}()
	if o.Copy {
		if err := copyHook(w, &o); err != nil {
			return err
		}
	}
	doc, err := HookDocument(o)
	if err != nil {
		return err
	}
	dirs := []HooksDir{{o.Dir, "--hooks-dir"}}
	if o.Dir == "" {
		if dirs, err = hooksDirs(w); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		fmt.Fprintf(out, "%s: %s\n", d.Dir, d.Why)
		if err := w.WriteFile(filepath.Join(d.Dir, HookFileName), doc, 0o644); err != nil {
			return err
		}
	}
	return w.Commit()
}

// copyHook writes this binary and this filesystem's configuration to the
// node, as files uninstall removes.
func copyHook(w *changes.Set, o *HookOptions) error {
	if filepath.Clean(o.Root) == "/" {
		return &OptionError{"--copy needs --root: the node's filesystem as this container sees it"}
	}
	if o.HookPath == "" || !filepath.IsAbs(o.HookPath) {
		return &OptionError{"--copy needs --hook-path: the absolute path on the node to copy oomguard-hook to"}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to copy: %w", err)
	}
	for _, c := range []struct {
		from, to string
		mode     os.FileMode
	}{{exe, o.HookPath, 0o755}, {o.ConfigPath, o.ConfigPath, 0o644}} {
		b, err := safeio.ReadFile(c.from, maxBinary)
		if err != nil {
			return fmt.Errorf("read %s to copy to the node: %w", c.from, err)
		}
		if err := w.WriteFile(c.to, b, c.mode); err != nil {
			return err
		}
	}
	return nil
}

// UninstallHook removes the hooks.d files Hook wrote.
func UninstallHook(root string, dryRun bool, out io.Writer) error {
	_, err := undo(root, HookManifest, dryRun, out)
	return err
}
