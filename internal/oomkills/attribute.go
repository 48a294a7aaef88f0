package oomkills

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
// matched from the root down (Lookup.At), and a record's fields are
// read so that no name supplies another field (kmsg). Where two containers
// remain possible, the kill is reported unattributed, with them.

// attribution is whose kill it was, and how the plugin knows.
type attribution struct {
	id     string
	info   Container
	known  bool   // a container the runtime told of
	member bool   // killed for its cgroup's memory.oom.group, with the victim
	cgroup string // the victim's cgroup, as far as known
	by     string // what told: "process", "record", "counters", or byNone
	// candidates, when unsure: every container the kill may have been in,
	// and their ids ("" outside every pod).
	candidates []Container
	ids        []string
}

// unsure reports whether the kill could be in more than one container.
func (a attribution) unsure() bool { return len(a.candidates) > 1 }

// byNone is a kill caught up on that neither its process nor its record
// places: the kernel's counts already held it when the books opened.
const byNone = "none"

// attribute finds the container k was in; the counters tell only of a kill
// read live (counted: since the books opened).
func (r *Reporter) attribute(k kmsg.Kill, book *killBook, counted bool) attribution {
	if cg, ok := r.victimCgroup(k.Pid, k.Time); ok {
		a := r.at(cg, "process")
		a.member = k.GroupOf != "" && holds(k.GroupOf, cg)
		return a
	}
	var ids []string
	for _, rd := range k.Readings {
		if id := r.idAt(rd.Task); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	switch {
	case len(ids) == 1:
		return r.at(k.Readings[0].Task, "record")
	case len(ids) > 1 && !counted:
		a := r.attribution(ids)
		a.by = "record"
		return a
	case len(ids) > 1:
		return r.counted(book, ids, k.Time)
	case !counted:
		return attribution{by: byNone}
	}
	a := r.counted(book, nil, k.Time)
	if len(k.MayRepeat) > 0 {
		a = r.mayRepeat(k, book, a)
	}
	if k.GroupOf != "" && a.known && a.id == r.idAt(k.GroupOf) {
		a.member, a.cgroup = true, k.GroupOf
	}
	return a
}

// placed is where the book put a kill.
func (a attribution) placed() placed {
	if a.unsure() || a.by == byNone {
		return placed{id: "?", ids: a.ids, infos: a.candidates}
	}
	return placed{id: a.id, infos: []Container{a.info}}
}

// mayRepeat widens a, the counters' place for a kill that may repeat a
// process the group kill printed before (k.MayRepeat), by the containers
// those were placed in whose counts cannot be read (removed, gone): a
// repeat is counted where its process was, and there no count read says
// that it is not one.
func (r *Reporter) mayRepeat(k kmsg.Kill, book *killBook, a attribution) attribution {
	ids, infos := a.ids, a.candidates
	if !a.unsure() {
		info := a.info
		if !a.known {
			info = outside
		}
		ids, infos = []string{a.id}, []Container{info}
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
			if id == "" || slices.Contains(ids, id) || i >= len(pl.infos) || r.countable(id) {
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
func (r *Reporter) countable(id string) bool {
	c, ok := r.ctrs.Container(id)
	if !ok || !c.Books.Counted {
		return false
	}
	_, ok = r.oomKillCount(id)
	return ok
}

// at is the container cg is in.
func (r *Reporter) at(cg, by string) attribution {
	c, known := r.ctrs.At(cg)
	return attribution{id: c.ID, info: c, known: known, cgroup: cg, by: by}
}

// idAt is the known container cg is in, "" for none.
func (r *Reporter) idAt(cg string) string {
	c, _ := r.ctrs.At(cg)
	return c.ID
}

// outside is a kill's candidate outside every pod.
var outside = Container{Name: "(a process outside every pod)"}

// counted attributes a kill by the kernel's counters: among the places in
// among ("" outside every pod; nil: anywhere), those whose count holds
// kills not reported yet. One place is the kill's; several are candidates.
// The counts read are those that changed (counts.go): a kill that looks
// outside every pod waits a moment for the kernel to tell of a change.
func (r *Reporter) counted(book *killBook, among []string, at time.Duration) attribution {
	// The kernel tells of a changed memory.events at most once in 10 ms
	// (cgroup_file_notify): a count the kill at `at` changed may not be
	// told of until then. Records read later than that wait for nothing.
	if r.counts.watching() {
		if lag := at + notifyLag - r.now(); lag > 0 && lag <= notifyLag {
			time.Sleep(lag)
		}
	}
	deadline := time.Now().Add(tellDelay)
	for wait := time.Duration(0); ; wait = time.Until(deadline) {
		ids, every := r.counts.changed(r, wait)
		if every {
			ids = r.countedIDs()
		}
		counting, holding, inPods, owed := r.owing(ids, among)
		if (among == nil || slices.Contains(among, "")) && book.outside(r.root, inPods+book.gone(holding)) {
			counting = append(counting, "")
		}
		if every || wait < 0 || owed { // a count that may lack kills (unsure) waits for one that holds
			return r.attribution(counting)
		}
	}
}

// tellDelay bounds the wait for the kernel to tell of a count it changed.
const tellDelay = 20 * time.Millisecond

// notifyLag is how long after a change the kernel may tell of it:
// CGROUP_FILE_NOTIFY_MIN_INTV (10 ms), and a margin for the timer.
const notifyLag = 15 * time.Millisecond

// countedIDs are the containers whose kills are counted, sorted.
func (r *Reporter) countedIDs() []string {
	ids := r.ctrs.Counted()
	slices.Sort(ids)
	return ids
}

// owing reads the counts of ids and returns those, among among (nil: any),
// that hold kills not reported yet or may (counts.unsure), every one that
// does (holding), how many they hold in all, and whether one in counting
// holds one for certain (owed).
func (r *Reporter) owing(ids, among []string) (counting, holding []string, inPods uint64, owed bool) {
	// A count that may lack kills (counts.unsure) cannot say it holds none.
	ids = slices.Compact(slices.Sorted(slices.Values(slices.Concat(ids, r.counts.unsure()))))
	read := r.readCounts(ids)
	for _, id := range ids {
		n, ok := read.n[id]
		c, still := r.ctrs.Container(id)
		b := c.Books
		if !still || !b.Counted {
			continue
		}
		unsure := ok && r.counts.isUnsure(id)
		if !ok || n <= b.Base+b.Reported && !unsure {
			r.counts.settled(id)
			continue
		}
		holds := n > b.Base+b.Reported
		if holds {
			inPods += n - b.Base - b.Reported
		}
		holding = append(holding, id)
		if among == nil || slices.Contains(among, id) {
			counting, owed = append(counting, id), owed || holds
		}
	}
	return counting, holding, inPods, owed
}

// attribution is the kill's place if counting holds one, else its candidates.
func (r *Reporter) attribution(counting []string) attribution {
	a := attribution{by: "counters"}
	switch {
	case len(counting) == 1 && counting[0] == "":
	case len(counting) == 1:
		a.id, a.known = counting[0], true
		a.info, _ = r.ctrs.Container(counting[0])
	default:
		a.ids = slices.Clone(counting)
		for _, id := range counting {
			if id == "" {
				a.candidates = append(a.candidates, outside)
			} else {
				c, _ := r.ctrs.Container(id)
				a.candidates = append(a.candidates, c)
			}
		}
	}
	return a
}

// victimCgroup is the cgroup of the killed process pid while /proc still
// shows that very process (it started by the kill's time: not another
// that got its pid since); false when it cannot tell: gone, or exiting on
// cgroup v1, which /proc shows at the root.
func (r *Reporter) victimCgroup(pid int, at time.Duration) (string, bool) {
	n := r.node()
	d, err := kernel.OpenProc(r.root, pid)
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
