package oomkills

import (
	"strings"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/kernel"
)

// CountFrom records the container's memory.events oom_kill as its
// baseline, once: kills counted before are not the plugin's to report.
func (r *Reporter) CountFrom(id string) {
	n, ok := r.oomKillCount(id)
	if !ok {
		return
	}
	fresh := false
	r.ctrs.UpdateBooks(id, func(b *Books) {
		if fresh = !b.Counted; fresh {
			b.Base, b.Counted = n, true
		}
	})
	if fresh {
		r.counts.add(id)
	}
}

// oomKillCount is the kills the kernel counted in the container (v1 and v2).
func (r *Reporter) oomKillCount(id string) (uint64, bool) {
	n, ok := r.readCounts([]string{id}).n[id]
	return n, ok
}

// countRead is the kills the kernel counted in containers, read between
// two readings of the node's count.
type countRead struct {
	n             map[string]uint64 // by container: those read
	before, after uint64
	nodeOK        bool
}

// readCounts reads the kills counted in containers ids: on cgroup v2 the
// container's count, which holds its children's; on v1 each of its
// cgroups' own, which the books follow (counts.follow) so that a cgroup
// removed keeps its kills in the container's count. A count below the
// kills told there makes the container unsure.
func (r *Reporter) readCounts(ids []string) countRead {
	read := countRead{n: make(map[string]uint64, len(ids))}
	before, err1 := kernel.NodeOOMKills(r.root)
	type walked struct {
		id   string
		each []kernel.CgroupKills
	}
	var trees []walked
	v2 := r.node().Mode() == kernel.ModeV2
	for _, id := range ids {
		ctr, ok := r.locate(id)
		if !ok {
			continue
		}
		if v2 {
			if n, err := ctr.OOMKills(); err == nil {
				read.n[id] = n
			}
			continue
		}
		if each, err := ctr.OOMKillsByCgroup(); err == nil {
			trees = append(trees, walked{id, each})
		}
	}
	after, err2 := kernel.NodeOOMKills(r.root)
	read.before, read.after, read.nodeOK = before, after, err1 == nil && err2 == nil
	for _, t := range trees {
		read.n[t.id] = r.counts.follow(t.id, t.each, read)
	}
	var short []string
	for id, n := range read.n {
		if c, ok := r.ctrs.Container(id); ok && c.Books.Counted && n < c.Books.Base+c.Books.Reported {
			short = append(short, id)
		}
	}
	for _, id := range short {
		r.counts.markUnsure(id)
	}
	return read
}

// refresh reads the count of a container a kill was just told in, on
// cgroup v1: the cgroup cg it was counted in is read while it is there,
// and one gone already took the kill out of the count (counts.toldIn).
func (r *Reporter) refresh(id, cg string) {
	if r.node().Mode() == kernel.ModeV2 {
		return
	}
	ctr, ok := r.locate(id)
	if !ok {
		return
	}
	if _, ok := r.readCounts([]string{id}).n[id]; !ok || cg == "" {
		return
	}
	if top := ctr.Cgroup(); cg != top && strings.HasPrefix(cg, top+"/") {
		r.counts.toldIn(id, strings.TrimPrefix(cg, top))
	}
}

// settle sets the books of the containers whose counts may lack kills at
// their counts, once no kill is in flight: every kill the node counted
// read and told, and none counted while their counts were read. Their
// kills told unsure stay told, and leave their counts.
func (r *Reporter) settle(book *killBook) {
	ids := r.counts.unsure()
	if len(ids) == 0 || !book.ok {
		return
	}
	read := r.readCounts(ids)
	if !read.nodeOK || read.before != read.after || read.after != book.base+book.seen {
		return
	}
	var set []string
	for id, n := range read.n {
		settled := false
		r.ctrs.UpdateBooks(id, func(b *Books) {
			if settled = b.Counted; settled {
				b.Base, b.Reported = n, 0
			}
		})
		if settled {
			set = append(set, id)
		}
	}
	r.counts.sure(set)
}

// locate is the cgroup of a container the runtime told of.
func (r *Reporter) locate(id string) (*enforce.Container, bool) {
	c, ok := r.ctrs.Container(id)
	if !ok || c.CgroupsPath == "" && c.Pid == 0 {
		return nil, false
	}
	ctr, err := r.node().Locate(c.CgroupsPath, int(c.Pid))
	return ctr, err == nil
}
