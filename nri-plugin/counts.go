package nriplugin

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
)

// counts knows whose kernel OOM-kill counts changed since the plugin read
// them, from inotify on cgroup v2's memory.events, so that a kill without
// its record reads those few counts and not every container's: what a
// kill costs does not grow with the node. Without it (cgroup v1, whose
// counts say nothing when they change; no inotify) every container's
// count is read.
type counts struct {
	mu      sync.Mutex
	w       *kernel.Watch // nil: read every container's
	closed  bool          // the kill reader stopped, or could not watch
	pending []string      // containers started since, to watch
	wds     map[int32]string
	ids     map[string]int32
	suspect map[string]bool // may hold kills not reported: read at the next kill
}

// open starts watching where the counts tell of changes (cgroup v2); the
// kill reader calls it, and close when it stops.
func (c *counts) open(mode kernel.Mode) {
	var w *kernel.Watch
	err := kernel.ErrUnsupported
	if mode == kernel.ModeV2 {
		w, err = kernel.NewWatch()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.closed, c.pending = true, nil
		return
	}
	c.w, c.wds, c.ids, c.suspect = w, map[int32]string{}, map[string]int32{}, map[string]bool{}
}

func (c *counts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w != nil {
		c.w.Close()
		c.w = nil
	}
	c.closed, c.pending = true, nil
}

// add is a container whose count the plugin keeps from now on (those
// started before the kill reader opens are watched once it does).
func (c *counts) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.pending = append(c.pending, id)
	}
}

// remove forgets a removed container.
func (c *counts) remove(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wd, ok := c.ids[id]; ok && c.w != nil {
		c.w.Remove(wd)
		delete(c.wds, wd)
	}
	delete(c.ids, id)
	delete(c.suspect, id)
}

// changed are the containers whose counts a kill must read, sorted;
// every: read them all. wait is how long to wait for a change when none
// came: the kernel counts a kill before it logs it, but tells of the
// change a moment later.
func (c *counts) changed(p *Plugin, wait time.Duration) (ids []string, every bool) {
	w, ok := c.watchPending(p)
	if !ok {
		return nil, true
	}
	wds, err := w.Changed(nil, wait)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, wd := range wds {
		if id, ok := c.wds[wd]; ok {
			c.suspect[id] = true
		}
	}
	if err != nil { // changes were lost
		return nil, true
	}
	for id := range c.suspect {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, false
}

// keep watches the containers started since, each second, so that they
// wait for no kill (and the queue for none). The kill reader runs it, and
// waits for it to return before it closes the watch.
func (c *counts) keep(ctx context.Context, p *Plugin, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.watchPending(p)
		}
	}
}

// watchPending watches the containers started since; false when changes
// are not watched (cgroup v1, no inotify): then every count is read.
func (c *counts) watchPending(p *Plugin) (*kernel.Watch, bool) {
	c.mu.Lock()
	w, pending := c.w, c.pending
	c.pending = nil
	c.mu.Unlock()
	if w == nil {
		return nil, false
	}
	for _, id := range pending {
		ctr, ok := p.locate(id)
		if !ok {
			continue // gone already, or no cgroup to count in
		}
		wd, err := ctr.WatchKills(w)
		if errors.Is(err, kernel.ErrUnsupported) { // cgroup v1: nothing to watch
			c.close()
			return nil, false
		}
		// Kills before the watch are not told of: its count says.
		n, read := p.oomKillCount(id)
		info, known := p.knownID(id)
		owing := !read || n > info.base+info.reported
		c.mu.Lock()
		switch {
		case kernel.IsGone(err) || !known: // no count to keep
		case err != nil: // out of watches: read it at every kill
			c.suspect[id] = true
		default:
			c.wds[wd], c.ids[id] = id, wd
			if owing {
				c.suspect[id] = true
			}
		}
		c.mu.Unlock()
	}
	return w, true
}

// settled is a container whose count holds no kill not reported.
func (c *counts) settled(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, watched := c.ids[id]; watched {
		delete(c.suspect, id)
	}
}

// watching reports whether changes are told of.
func (c *counts) watching() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w != nil
}
