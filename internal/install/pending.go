package install

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/changes"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/restartstate"
)

// pendingRestarts are the runtimes whose newest process under procRoot started
// before the newest file the record lists in their configuration; "" for
// procRoot looks nowhere.
func pendingRestarts(w *changes.Set, procRoot string, rts []nriRuntime) ([]restartstate.Pending, error) {
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
	var out []restartstate.Pending
	for _, rt := range rts {
		dir := rt.dir() + "/"
		var newest time.Time
		for _, f := range w.Files() {
			if !strings.HasPrefix(f, dir) {
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
		procs, err := kernel.FindComm(procRoot, rt.comm())
		if err != nil {
			return nil, fmt.Errorf("find %s's process: %w", rt.unit(), err)
		}
		if newest.IsZero() || len(procs) == 0 {
			continue
		}
		if p := procs[len(procs)-1]; p.StartTime(boot).Before(newest) {
			out = append(out, restartstate.Pending{Unit: rt.unit(), Process: p})
		}
	}
	return out, nil
}
