package install

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/oomguard/oomguard/internal/atomicfile"
)

// DefaultHooksDir is where CRI-O and podman read hook definitions.
const DefaultHooksDir = "/etc/containers/oci/hooks.d"

// HookFileName is the hooks.d file oomguard-hook installs.
const HookFileName = "oomguard.json"

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
	Dir        string // the hooks.d directory
	HookPath   string // absolute path of oomguard-hook; "" is this executable
	ConfigPath string // the configuration the hook reads
	Stage      string // createRuntime, or prestart for runtimes without it
	DryRun     bool
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

// Hook writes the hooks.d file; a second run with the same options changes nothing.
func Hook(o HookOptions, out io.Writer) error {
	doc, err := HookDocument(o)
	if err != nil {
		return err
	}
	target := filepath.Join(o.Dir, HookFileName)
	if old, err := os.ReadFile(target); err == nil && string(old) == string(doc) {
		fmt.Fprintf(out, "unchanged %s\n", target)
		return nil
	}
	if o.DryRun {
		fmt.Fprintf(out, "would write %s:\n%s", target, doc)
		return nil
	}
	if err := atomicfile.Write(target, doc, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s\n", target)
	return nil
}
