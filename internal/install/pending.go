package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/changes"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/safeio"
)

// State is what install --nri-only leaves for the plugin beside it: the NRI
// socket, and each runtime that must restart before it serves NRI there,
// as its process ran when install looked. The plugin waits while that
// process runs (a restart is another process), and may restart it itself.
type State struct {
	Socket  string    `json:"socket"`
	Pending []Pending `json:"pending,omitempty"`
}

// Pending is a runtime whose process started before the newest file of its
// configuration oomguard wrote: it has not read it.
type Pending struct {
	Unit    string         `json:"unit"`
	Process kernel.Started `json:"process"`
}

// Waiting are the pending runtimes whose process still runs under root.
func (s State) Waiting(root string) []Pending {
	var out []Pending
	for _, p := range s.Pending {
		if p.Process.Running(root) {
			out = append(out, p)
		}
	}
	return out
}

// runtimeOf is each unit's process name and configuration directory.
var runtimeOf = map[string]struct{ comm, dir string }{
	"containerd.service": {"containerd", "/etc/containerd/"},
	"crio.service":       {"crio", "/etc/crio/"},
}

// pendingRestarts are the units whose newest process under procRoot started
// before the newest file the record lists in their configuration; "" for
// procRoot looks nowhere.
func pendingRestarts(w *changes.Set, procRoot string, units []string) ([]Pending, error) {
	if procRoot == "" {
		return nil, nil
	}
	boot, err := kernel.BootTime(procRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // a root without the node's /proc: nothing to tell
	}
	if err != nil {
		return nil, fmt.Errorf("when did the node boot: %w", err)
	}
	var out []Pending
	for _, u := range units {
		rt := runtimeOf[u]
		var newest time.Time
		for _, f := range w.Files() {
			if !strings.HasPrefix(f, rt.dir) {
				continue
			}
			h, err := w.Host(f)
			if err != nil {
				continue
			}
			if st, err := os.Stat(h); err == nil && st.ModTime().After(newest) {
				newest = st.ModTime()
			}
		}
		procs, err := kernel.FindComm(procRoot, rt.comm)
		if err != nil {
			return nil, fmt.Errorf("find %s's process: %w", u, err)
		}
		if newest.IsZero() || len(procs) == 0 {
			continue
		}
		if p := procs[len(procs)-1]; p.StartTime(boot).Before(newest) {
			out = append(out, Pending{Unit: u, Process: p})
		}
	}
	return out, nil
}

// WriteState writes s to path, whole or not at all.
func WriteState(path string, s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// ReadState reads what install left at path; none is a State with nothing
// pending.
func ReadState(path string) (State, error) {
	var s State
	b, err := safeio.ReadFile(path, 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
