package nriplugin

import (
	"slices"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kmsg"
)

// What the plugin trusts in a kill, in this order: the killed process as
// /proc still shows it (the very process: started by the kill's time), its
// oom-kill record when the record reads one way only, and the kernel's own
// counts of the kills in each container (memory.events oom_kill, or v1's
// memory.oom_control) against the kills reported there. A cgroup path is
// matched from the root down (containers.go), and a record's fields are
// read so that no name supplies another field (kmsg). Where two containers
// remain possible, the kill is reported unattributed, with them.

// attribution is whose kill it was, and how the plugin knows.
type attribution struct {
	id     string
	info   ctrInfo
	known  bool   // a container the runtime told of
	member bool   // killed for its cgroup's memory.oom.group, with the victim
	cgroup string // the victim's cgroup, as far as known
	by     string // what told: "process", "record", "counters", or byNone
	// candidates, when unsure: every container the kill may have been in,
	// and their ids ("" outside every pod).
	candidates []ctrInfo
	ids        []string
}

// unsure reports whether the kill could be in more than one container.
func (a attribution) unsure() bool { return len(a.candidates) > 1 }

// byNone is a kill caught up on that neither its process nor its record
// places: the kernel's counts already held it when the books opened.
const byNone = "none"

// attribute finds the container k was in; the counters tell only of a kill
// read live (counted: since the books opened).
func (p *Plugin) attribute(k kmsg.Kill, book *killBook, counted bool) attribution {
	if cg, ok := p.victimCgroup(k.Pid, k.Time); ok {
		a := p.at(cg, "process")
		a.member = k.GroupOf != "" && holds(k.GroupOf, cg)
		return a
	}
	var ids []string
	for _, r := range k.Readings {
		if id := p.idAt(r.Task); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	switch {
	case len(ids) == 1:
		return p.at(k.Readings[0].Task, "record")
	case len(ids) > 1 && !counted:
		a := p.attribution(ids)
		a.by = "record"
		return a
	case len(ids) > 1:
		return p.counted(book, ids, k.Time)
	case !counted:
		return attribution{by: byNone}
	}
	a := p.counted(book, nil, k.Time)
	if len(k.MayRepeat) > 0 {
		a = p.mayRepeat(k, book, a)
	}
	if k.GroupOf != "" && a.known && a.id == p.idAt(k.GroupOf) {
		a.member, a.cgroup = true, k.GroupOf
	}
	return a
}

// placed is where the book put a kill.
func (a attribution) placed() placed {
	if a.unsure() || a.by == byNone {
		return placed{id: "?", ids: a.ids, infos: a.candidates}
	}
	return placed{id: a.id, infos: []ctrInfo{a.info}}
}

// mayRepeat widens a, the counters' place for a kill that may repeat a
// process the group kill printed before (k.MayRepeat), by the containers
// those were placed in whose counts cannot be read (removed, gone): a
// repeat is counted where its process was, and there no count read says
// that it is not one.
func (p *Plugin) mayRepeat(k kmsg.Kill, book *killBook, a attribution) attribution {
	ids, infos := a.ids, a.candidates
	if !a.unsure() {
		info := a.info
		if !a.known {
			info = outside
		}
		ids, infos = []string{a.id}, []ctrInfo{info}
	}
	n := len(ids)
	for _, pid := range k.MayRepeat {
		pl, ok := book.placeOf(pid)
		if !ok {
			continue
		}
		cands := pl.ids
		if pl.id != "?" {
			cands = []string{pl.id}
		}
		for i, id := range cands {
			// Outside every pod the node's count tells; a count read, its own.
			if id == "" || slices.Contains(ids, id) || i >= len(pl.infos) || p.countable(id) {
				continue
			}
			ids, infos = append(ids, id), append(infos, pl.infos[i])
		}
	}
	if len(ids) == n {
		return a
	}
	return attribution{by: "counters", ids: ids, candidates: infos}
}

// countable reports whether the kills of a container the runtime told of
// are counted, and its count can be read now.
func (p *Plugin) countable(id string) bool {
	c, ok := p.reg.info(id)
	if !ok || !c.counted {
		return false
	}
	_, ok = p.oomKillCount(id)
	return ok
}

// at is the container cg is in.
func (p *Plugin) at(cg, by string) attribution {
	id, info, known := p.reg.at(cg)
	return attribution{id: id, info: info, known: known, cgroup: cg, by: by}
}

// idAt is the known container cg is in, "" for none.
func (p *Plugin) idAt(cg string) string {
	id, _, _ := p.reg.at(cg)
	return id
}

// outside is a kill's candidate outside every pod.
var outside = ctrInfo{name: "(a process outside every pod)"}

// counted attributes a kill by the kernel's counters: among the places in
// among ("" outside every pod; nil: anywhere), those whose count holds
// kills not reported yet. One place is the kill's; several are candidates.
// The counts read are those that changed (counts.go): a kill that looks
// outside every pod waits a moment for the kernel to tell of a change.
func (p *Plugin) counted(book *killBook, among []string, at time.Duration) attribution {
	// The kernel tells of a changed memory.events at most once in 10 ms
	// (cgroup_file_notify): a count the kill at `at` changed may not be
	// told of until then. Records read later than that wait for nothing.
	if p.counts.watching() {
		if lag := at + notifyLag - p.kmsgNow(); lag > 0 && lag <= notifyLag {
			time.Sleep(lag)
		}
	}
	deadline := time.Now().Add(tellDelay)
	for wait := time.Duration(0); ; wait = time.Until(deadline) {
		ids, every := p.counts.changed(p, wait)
		if every {
			ids = p.countedIDs()
		}
		counting, holding, inPods, owed := p.owing(ids, among)
		if (among == nil || slices.Contains(among, "")) && book.outside(p.root, inPods+book.gone(holding)) {
			counting = append(counting, "")
		}
		if every || wait < 0 || owed { // a count that may lack kills (unsure) waits for one that holds
			return p.attribution(counting)
		}
	}
}

// tellDelay bounds the wait for the kernel to tell of a count it changed.
const tellDelay = 20 * time.Millisecond

// notifyLag is how long after a change the kernel may tell of it:
// CGROUP_FILE_NOTIFY_MIN_INTV (10 ms), and a margin for the timer.
const notifyLag = 15 * time.Millisecond

// countedIDs are the containers whose kills are counted, sorted.
func (p *Plugin) countedIDs() []string {
	ids := p.reg.counted()
	slices.Sort(ids)
	return ids
}

// owing reads the counts of ids and returns those, among among (nil: any),
// that hold kills not reported yet or may (counts.unsure), every one that
// does (holding), how many they hold in all, and whether one in counting
// holds one for certain (owed).
func (p *Plugin) owing(ids, among []string) (counting, holding []string, inPods uint64, owed bool) {
	// A count that may lack kills (counts.unsure) cannot say it holds none.
	ids = slices.Compact(slices.Sorted(slices.Values(slices.Concat(ids, p.counts.unsure()))))
	r := p.readCounts(ids)
	for _, id := range ids {
		n, ok := r.n[id]
		c, still := p.reg.info(id)
		if !still || !c.counted {
			continue
		}
		unsure := ok && p.counts.isUnsure(id)
		if !ok || n <= c.base+c.reported && !unsure {
			p.counts.settled(id)
			continue
		}
		holds := n > c.base+c.reported
		if holds {
			inPods += n - c.base - c.reported
		}
		holding = append(holding, id)
		if among == nil || slices.Contains(among, id) {
			counting, owed = append(counting, id), owed || holds
		}
	}
	return counting, holding, inPods, owed
}

// attribution is the kill's place if counting holds one, else its candidates.
func (p *Plugin) attribution(counting []string) attribution {
	a := attribution{by: "counters"}
	switch {
	case len(counting) == 1 && counting[0] == "":
	case len(counting) == 1:
		a.id, a.known = counting[0], true
		a.info, _ = p.reg.info(counting[0])
	default:
		a.ids = slices.Clone(counting)
		for _, id := range counting {
			if id == "" {
				a.candidates = append(a.candidates, outside)
			} else {
				info, _ := p.reg.info(id)
				a.candidates = append(a.candidates, info)
			}
		}
	}
	return a
}

// killBook balances the kills the node counted (/proc/vmstat's oom_kill)
// against the kills the plugin attributed: a kill not attributed that no
// container's count holds was outside every pod. A kill reported
// unattributed stays in the count of the container it was in, so the
// kills after it are as unsure as it was until the counts settle it, or
// until no container it may have been in still counts kills (gone).
type killBook struct {
	base       uint64
	attributed uint64         // to one container, or outside every pod
	seen       uint64         // every kill read as the kernel logged it
	ok         bool           // the node's count could be read
	victim     placed         // where the last victim the kernel chose was
	chosen     kmsg.Kill      // that victim's kill: its group's members' OOM
	members    map[int]placed // the processes printed in its group's second: where each was
	// unplaced are the candidates of each kill read and told without its
	// container (nil: not known); one past maxUnplaced is never gone.
	unplaced [][]string
}

// maxMembers bounds the group members a book keeps (a repeat of one past
// them is not counted again).
const maxMembers = 4096

// placed is where the book put a kill: a container's id, "" outside every
// pod, or "?" unsure among ids; infos names id or ids as they were then.
type placed struct {
	id    string
	ids   []string
	infos []ctrInfo
}

// placeOf is where the book put the process pid printed in the last
// group kill, or that group's victim; false when it kept none.
func (b *killBook) placeOf(pid int) (placed, bool) {
	if pl, ok := b.members[pid]; ok {
		return pl, true
	}
	if pid == b.chosen.Pid {
		return b.victim, true
	}
	return placed{}, false
}

// maxUnplaced bounds the unplaced kills a book keeps the candidates of.
const maxUnplaced = 4096

// unplace books a kill read and told without its container.
func (b *killBook) unplace(ids []string) {
	if len(b.unplaced) < maxUnplaced {
		b.unplaced = append(b.unplaced, ids)
	}
}

// gone is how many kills told without their container no count read
// holds: none of their candidates is among holding, the containers whose
// counts were read holding kills not reported (a container stopped, its
// cgroup removed, or the runtime's removal of it told, holds none).
func (b *killBook) gone(holding []string) uint64 {
	var n uint64
	for _, ids := range b.unplaced {
		if len(ids) > 0 && !slices.ContainsFunc(ids, func(id string) bool { return id != "" && slices.Contains(holding, id) }) {
			n++
		}
	}
	return n
}

// open starts the book at the node's count now.
func (b *killBook) open(root string) {
	n, err := kernel.NodeOOMKills(root)
	*b = killBook{base: n, ok: err == nil}
}

// outside reports whether a kill not reported yet could be outside every
// pod, inPods being the kills the containers' counts hold unreported.
func (b *killBook) outside(root string, inPods uint64) bool {
	n, err := kernel.NodeOOMKills(root)
	if !b.ok || err != nil || n < b.base {
		return true
	}
	return n-b.base > b.attributed+inPods
}

// victimCgroup is the cgroup of the killed process pid while /proc still
// shows that very process (it started by the kill's time: not another
// that got its pid since); false when it cannot tell: gone, or exiting on
// cgroup v1, which /proc shows at the root.
func (p *Plugin) victimCgroup(pid int, at time.Duration) (string, bool) {
	n := p.node.Load()
	d, err := kernel.OpenProc(p.root, pid)
	if err != nil {
		return "", false
	}
	defer d.Close()
	start, err := d.Start()
	if err != nil || time.Duration(start)*(time.Second/kernel.ClockTicks) > at+startSlack {
		return "", false
	}
	cg, err := d.Cgroup(n.Mode())
	cg = strings.TrimSuffix(cg, " (deleted)")
	if err != nil || cg == "/" || cg == "" {
		return "", false
	}
	return cg, true
}

// startSlack covers the start time's tick and the clocks' difference
// (boot time against the log's monotonic time).
const startSlack = 20 * time.Millisecond

// holds reports whether cgroup dir is cg or one of its ancestors.
func holds(dir, cg string) bool {
	return dir == "/" || cg == dir || strings.HasPrefix(cg, dir+"/")
}
