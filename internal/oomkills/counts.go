package oomkills

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
	kick    chan struct{} // pending grew: for keep, once open
	wds     map[int32]string
	ids     map[string]int32
	suspect map[string]bool // may hold kills not reported: read at the next kill
	trees   map[string]*tree
}

// tree is what the plugin read of a container's cgroups' counts on cgroup
// v1, where each cgroup counts its own kills and one removed takes them
// out of the container's sum: the books keep them (retired).
type tree struct {
	last     map[treeKey]uint64 // each cgroup's count at the last read
	retired  uint64             // the last counts read of the cgroups removed since
	departed []string           // the cgroups found removed at the last read
	node     uint64             // the node's count just before that read
	nodeOK   bool
	// unsure: its count may lack kills the books hold or owe (a cgroup
	// removed after kills no read saw), until a read with no kill in
	// flight sets its books at its count again (Reporter.settle).
	unsure bool
}

// treeKey is one cgroup: a cgroup made again at a path is another.
type treeKey struct {
	path string
	ino  uint64
}

// maxTree bounds the cgroups a container's tree keeps the count of; past
// it, a cgroup removed after the node counted a kill makes it unsure.
const maxTree = 4096

// follow keeps the counts of a container's cgroups read just now (each,
// between the node's counts r.before and r.after) and returns the
// container's count: theirs, and those of the cgroups removed since.
func (c *counts) follow(id string, each []kernel.CgroupKills, r countRead) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trees == nil {
		c.trees = map[string]*tree{}
	}
	t := c.trees[id]
	if t == nil {
		t = &tree{}
		c.trees[id] = t
	}
	cur := make(map[treeKey]uint64, min(len(each), maxTree))
	var sum uint64
	over := len(each) > maxTree
	for _, e := range each {
		sum += e.Kills
		if len(cur) < maxTree && (!over || e.Kills > 0) { // past the bound, those that hold kills
			cur[treeKey{e.Path, e.Ino}] = e.Kills
		}
	}
	t.departed = t.departed[:0]
	for k, n := range t.last {
		if _, ok := cur[k]; !ok {
			t.retired += n
			t.departed = append(t.departed, k.path)
		}
	}
	// A cgroup removed is whole in the books only if the node counted no kill since it was read.
	moved := !r.nodeOK || !t.nodeOK || r.after != t.node
	if moved && (len(t.departed) > 0 || over) {
		t.unsure = true
	}
	t.last, t.node, t.nodeOK = cur, r.before, r.nodeOK
	return sum + t.retired
}

// toldIn is a kill told in cgroup sub of the container (below its own)
// just before its count was read: a cgroup no read saw and now gone took
// it out of the count, and maybe others with it.
func (c *counts) toldIn(id, sub string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trees[id]
	if t == nil || slices.Contains(t.departed, sub) {
		return // read before it went: the books followed it
	}
	for k := range t.last {
		if k.path == sub {
			return
		}
	}
	t.retired++
	t.unsure = true
}

// markUnsure is a container whose count may lack kills the books hold.
func (c *counts) markUnsure(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trees == nil {
		c.trees = map[string]*tree{}
	}
	if c.trees[id] == nil {
		c.trees[id] = &tree{}
	}
	c.trees[id].unsure = true
}

// unsure are the containers whose counts may lack kills, sorted.
func (c *counts) unsure() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, t := range c.trees {
		if t.unsure {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// isUnsure reports whether the container's count may lack kills.
func (c *counts) isUnsure(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trees[id]
	return t != nil && t.unsure
}

// sure are containers whose books were set at their counts.
func (c *counts) sure(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if t := c.trees[id]; t != nil {
			t.unsure = false
		}
	}
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
	c.kick = make(chan struct{}, 1)
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
		select {
		case c.kick <- struct{}{}: // nil until open: nothing to send to
		default:
		}
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
	delete(c.trees, id)
}

// changed are the containers whose counts a kill must read, sorted;
// every: read them all. wait is how long to wait for a change when none
// came: the kernel counts a kill before it logs it, but tells of the
// change a moment later.
func (c *counts) changed(r *Reporter, wait time.Duration) (ids []string, every bool) {
	w, ok := c.watchPending(r)
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

// keep watches the containers started since, a second after the first of
// them (a second's starts at once), so that they wait for no kill (and the
// queue for none); on an idle node it never wakes. The kill reader runs it
// once open, and waits for it to return before it closes the watch.
func (c *counts) keep(ctx context.Context, r *Reporter, done chan<- struct{}) {
	defer close(done)
	c.mu.Lock()
	kick, pending := c.kick, len(c.pending) > 0 // added before the reader opened
	c.mu.Unlock()
	for {
		if !pending {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
		}
		pending = false
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		c.watchPending(r)
	}
}

// watchPending watches the containers started since; false when changes
// are not watched (cgroup v1, no inotify): then every count is read.
func (c *counts) watchPending(r *Reporter) (*kernel.Watch, bool) {
	c.mu.Lock()
	w, pending := c.w, c.pending
	c.pending = nil
	c.mu.Unlock()
	if w == nil {
		return nil, false
	}
	for _, id := range pending {
		ctr, ok := r.locate(id)
		if !ok {
			continue // gone already, or no cgroup to count in
		}
		wd, err := ctr.WatchKills(w)
		if errors.Is(err, kernel.ErrUnsupported) { // cgroup v1: nothing to watch
			c.close()
			return nil, false
		}
		// Kills before the watch are not told of: its count says.
		n, read := r.oomKillCount(id)
		info, known := r.ctrs.Container(id)
		owing := !read || n > info.Books.Base+info.Books.Reported
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
