// Package restartstate is the contract between install --nri-only and the
// plugin beside it: the file that says which runtimes must still restart
// before they serve NRI at oomguard's socket, and how a restart is asked
// for. The installer writes it; the plugin reads it, waits, or restarts.
package restartstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/oomguard/oomguard/internal/atomicfile"
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

// Restarter restarts a runtime's systemd unit on the node under root and
// returns its job once it ended; a job that did not succeed is an error
// with the job, one that never started an error without it.
type Restarter func(root, unit string) (job string, err error)

// maxState bounds the file: a few runtimes' lines.
const maxState = 64 << 10

// Write writes s to path, whole or not at all.
func Write(path string, s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// Read reads what install left at path; none is a State with nothing
// pending.
func Read(path string) (State, error) {
	var s State
	b, err := safeio.ReadFile(path, maxState)
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
