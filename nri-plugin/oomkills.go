package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/escape"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/podevents"
)

// kmsgSource is the kernel's log (kmsg.Reader), or a test's.
type kmsgSource interface {
	Read() (kmsg.Record, error)
	// SetDeadline makes a Read waiting past t fail with os.ErrDeadlineExceeded.
	SetDeadline(t time.Time) error
	Close() error
}

// openKmsg opens the kernel's log at its end, or at its oldest record.
func openKmsg(oldest bool) (kmsgSource, error) {
	if oldest {
		return kmsg.OpenOldest("/dev/kmsg")
	}
	return kmsg.Open("/dev/kmsg")
}

// How a kill reaches the report: read as the kernel logs it; read after it
// was logged, while no instance read the log (the books of each container
// already hold it, and /proc no longer shows its process); or reported
// already by the instance that held the node's lock before, and read again
// for what later records need of it (a group kill's victim).
type replay int

const (
	live replay = iota
	caughtUp
	reportedBefore
)

// syncWait bounds how long a reader that takes over waits for the runtime
// to tell which containers run, so that the kills it catches up on are
// named.
const syncWait = 5 * time.Second

// Kinds of OOM kill, as reported.
const (
	KillContainer = "container" // the container's own memory limit
	KillParent    = "parent"    // a limit above it: its pod's, its QoS class's
	KillLimit     = "limit"     // a memory limit; which one, the kernel did not say (its rate limit)
	KillNode      = "node"      // the node ran out (a global OOM)
	KillUnknown   = "unknown"   // its record was overwritten before it was read
)

// ctrInfo names a container the runtime told the plugin of, and where its
// OOM kills are counted.
type ctrInfo struct {
	namespace, pod, name, podUID string
	cgroupsPath                  string // from its spec, "" when the runtime gave none
	pid                          uint32
	// Its memory.events oom_kill when the plugin first looked, and the
	// kills reported since: more than base+reported is a kill whose record
	// the kernel's rate limit dropped.
	base, reported uint64
	counted        bool // base was read
}

// Recorder records Events on pods (podevents.Recorder); one that has a
// Run(ctx) method, as that one does, is run beside the plugin.
type Recorder interface {
	Warning(pod podevents.Pod, container, reason, message string)
}

// EventReason is the reason of the Events on a pod for an OOM kill in it.
const EventReason = "OOMKilling"

// largestTasks is how many of a container's processes a memcg kill's report lists.
const largestTasks = 5

// watchKills reports every OOM kill the kernel logs, as it logs it: one log
// line, a counter by container (or the node-daemon counter), and for a
// guarded container's own limit its largest processes right after.
func (p *Plugin) watchKills(ctx context.Context, open func(oldest bool) (kmsgSource, error)) {
	p.counts.open(p.node.Load().Mode())
	keepCtx, stopKeep := context.WithCancel(ctx)
	kept := make(chan struct{})
	go p.counts.keep(keepCtx, p, kept)
	defer func() { stopKeep(); <-kept; p.counts.close() }()
	// Where the instance that held the node's lock before stopped, in this
	// boot's log: from there, no kill is lost or reported twice.
	boot := bootID(p.root)
	var from position
	resume := false
	if p.lock != nil {
		from, resume = p.lock.readPosition(boot)
	}
	start := p.kmsgNow() // before the open: what the log holds after it is this chain's
	src, err := open(resume)
	if err != nil {
		p.log.Warn("not reading the kernel log; OOM kills in guarded containers are counted at each verification only", "err", err)
		return
	}
	go func() { <-ctx.Done(); src.Close() }()
	parser := kmsg.Parser{SameProcess: func(pid, tid int) (bool, bool) { return kernel.SameProcess(p.root, pid, tid) }}
	var book killBook
	book.open(p.root)
	var caughtUpTo time.Duration // kills logged before: read after the fact
	if resume {
		select { // the containers, to name the kills caught up on
		case <-p.synced:
		case <-time.After(syncWait):
		case <-ctx.Done():
		}
		p.rebase(&book) // its counts hold the kills until now
		caughtUpTo = p.kmsgNow()
		p.log.Info("reading the kernel log from where the last instance stopped", "after_record", from.Clean, "last_reported", from.Reported)
	}
	if !resume {
		from = position{Since: start} // read from the log's end: now
	}
	var pw *positionFile
	if p.lock != nil {
		if pw, err = p.lock.positionFile(position{Boot: boot, Clean: from.Clean, Reported: from.Reported, Since: from.Since}); err != nil {
			p.log.Warn("cannot keep the kernel log's position beside the node's lock: the next instance reads from the log's end", "err", err)
			pw = nil
		}
	}
	defer pw.close()
	first := resume
	var lostAt time.Time // records were overwritten then: their kills are told once the log is read up to now
	tellLost := func(t lostTally) {
		lostAt = time.Time{}
		src.SetDeadline(time.Time{})
		p.tellLost(t, &book)
	}
	var ahead *kmsgRead // read while the kills lost were counted: handled first
	for ctx.Err() == nil {
		var rec kmsg.Record
		var err error
		if ahead != nil {
			rec, err, ahead = ahead.rec, ahead.err, nil
		} else {
			if !lostAt.IsZero() {
				src.SetDeadline(time.Now().Add(lostQuiet))
			}
			rec, err = src.Read()
		}
		switch {
		case errors.Is(err, kmsg.ErrLost):
			p.m.kmsgLost.Inc()
			p.log.Warn("kernel log records were overwritten before oomguard read them; the OOM kills among them are reported by container, from the kernel's counts, once the records left are read")
			switch {
			case src.SetDeadline(time.Now().Add(lostQuiet)) != nil:
				p.rebase(&book) // no quiet to wait for: those kills go untold
			case lostAt.IsZero():
				lostAt = time.Now()
			}
			continue
		case !lostAt.IsZero() && errors.Is(err, os.ErrDeadlineExceeded):
			// Read up to now: the counts hold the kills lost, unless one
			// was logged while they were read (its count may be in them).
			t := p.countLost()
			src.SetDeadline(time.Now().Add(time.Millisecond))
			if r, err := src.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
				ahead = &kmsgRead{r, err}
				continue
			}
			tellLost(t)
			continue
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("reading the kernel log failed; OOM kills are no longer reported as they happen", "err", err)
			}
			return
		}
		if first {
			first = false
			if from.Clean > 0 && rec.Seq > from.Clean+1 {
				p.m.kmsgLost.Inc()
				p.log.Warn("kernel log records after where the last instance stopped were overwritten before this one read them; OOM kills among them are not reported",
					"after_record", from.Clean, "oldest_left", rec.Seq)
			}
		}
		if resume && (rec.Seq <= from.Clean || rec.Time < from.Since) {
			continue
		}
		if k, ok := parser.Feed(rec); ok {
			how := live
			switch {
			case resume && k.Seq <= from.Reported:
				how = reportedBefore
			case resume && k.Time < caughtUpTo:
				how = caughtUp
			}
			if p.reportKill(k, &book, how) && how == live {
				book.attributed++
			}
			if how == live {
				book.seen++
				p.settle(&book)
			}
			if how != reportedBefore {
				pw.reported(k.Seq)
			}
		}
		if parser.Clean(rec.Time) {
			pw.clean(rec.Seq)
		}
		// A log never quiet (a process writing it without a pause): read up to now will do.
		if !lostAt.IsZero() && time.Since(lostAt) > lostWait && p.kmsgNow()-rec.Time < lostQuiet {
			tellLost(p.countLost())
		}
	}
}

// reportKill says whose process the kernel killed, and how (attribute.go
// says from what); it reports whether it could tell. A kill that could be
// in more than one container is reported unattributed, with them, and no
// Event is sent for it.
func (p *Plugin) reportKill(k kmsg.Kill, book *killBook, how replay) bool {
	if k.Again { // the kernel counted a process twice: so does the book
		if how != live { // the books were opened after it
			return false
		}
		pl, ok := book.placeOf(k.Pid)
		id := pl.id
		known := p.reg.update(id, func(rec *record) {
			if ok {
				rec.info.reported++
			}
		})
		told := ok && (known || id == "")
		switch {
		case told:
		case id == "?":
			book.unplace(pl.ids)
		case ok: // a container removed since
			book.unplace([]string{id})
		default:
			book.unplace(nil)
		}
		return told
	}
	a := p.attribute(k, book, how == live)
	if k.GroupOf != "" { // printed while the kernel killed a group: its victim stays the one it chose
		// Another group's member (its victim's record in this group's second) keeps its own limit.
		if a.member && (book.chosen.TaskMemcg == "" || holds(k.GroupOf, book.chosen.TaskMemcg)) {
			k.Constraint, k.OOMMemcg, k.Readings = book.chosen.Constraint, book.chosen.OOMMemcg, book.chosen.Readings
		}
		if book.members == nil {
			book.members = map[int]placed{}
		}
		if len(book.members) < maxMembers {
			book.members[k.Pid] = a.placed()
		}
	} else {
		book.victim, book.chosen, book.members = a.placed(), k, nil
	}
	if how == reportedBefore {
		return false
	}
	kind := p.killKind(k, a)
	if a.known && how == live {
		p.reg.update(a.id, func(rec *record) { rec.info.reported++ })
		p.refresh(a.id, a.cgroup)
	}
	attrs := []any{"pid", k.Pid, "command", escape.Terminal(k.Comm), "oom_score_adj", k.ScoreAdj, "rss_kb", k.RSSKiB,
		"kind", kind, "cgroup", escape.Terminal(a.cgroup), "kernel_time", k.Time.Round(time.Millisecond)}
	if a.by != "" && a.by != byNone {
		attrs = append(attrs, "attributed_by", a.by)
	}
	if how == caughtUp {
		attrs = append(attrs, "caught_up", true)
	}
	if now := kmsg.Now(); now > 0 {
		lag := max(0, now-k.Time) // the kernel's clock runs a hair ahead
		p.m.killLag.Observe(lag.Seconds())
		attrs = append(attrs, "reported_after", lag.Round(time.Millisecond))
	}
	switch {
	case a.member:
		attrs = append(attrs, "oom_group_member", true)
	case k.GroupOf != "": // killed while the kernel killed a group: maybe its member, not the kernel's choice
		attrs = append(attrs, "oom_group_of", escape.Terminal(k.GroupOf))
	case kind == KillNode:
		attrs = append(attrs, p.predicted(k)...)
	}
	if len(k.MayRepeat) > 0 { // its own kill, or one of these again through a thread gone from /proc
		pids := make([]string, len(k.MayRepeat))
		for i, pid := range k.MayRepeat {
			pids[i] = strconv.Itoa(pid)
		}
		attrs = append(attrs, "maybe_repeat_of", strings.Join(pids, ","))
	}
	if a.by == byNone { // caught up on, and nothing left tells whose
		p.m.unattributed.WithLabelValues(kind).Inc()
		p.log.Warn("OOM kill", append(attrs, "attributed", false, "candidates", "(unknown: it came while no oomguard-nri read the kernel log, and its record names no cgroup)")...)
		return false
	}
	if a.unsure() {
		names := make([]string, len(a.candidates))
		for i, c := range a.candidates {
			names[i] = escape.Terminal(c.namespace + "/" + c.pod + "/" + c.name)
		}
		p.m.unattributed.WithLabelValues(kind).Inc()
		p.log.Warn("OOM kill", append(attrs, "attributed", false, "candidates", strings.Join(names, ", "))...)
		if how == live {
			book.unplace(a.ids)
		}
		return false
	}
	if !a.known {
		// Outside every pod: a cgroup not kubelet's, or, unnamed, a node
		// OOM's victim no container counted.
		daemon := a.cgroup != "" && !strings.Contains(a.cgroup, "kubepods") || a.cgroup == "" && k.Global()
		if daemon {
			p.m.daemonKills.WithLabelValues(kind).Inc()
		} else {
			p.m.kills.WithLabelValues("", "", "", kind).Inc()
		}
		p.log.Warn("OOM kill", append(attrs, "node_daemon", daemon)...)
		return true
	}
	info := a.info
	p.m.kills.WithLabelValues(info.namespace, info.pod, info.name, kind).Inc()
	attrs = append([]any{"pod", info.namespace + "/" + info.pod, "container", info.name}, attrs...)
	g := p.reg.guard(a.id)
	if g != nil && g.plan.Group != nil && !*g.plan.Group {
		attrs = append(attrs, "container_kept_running", true)
	}
	p.log.Warn("OOM kill", attrs...)
	if p.events != nil {
		p.events.Warning(podevents.Pod{Namespace: info.namespace, Name: info.pod, UID: info.podUID}, info.name, EventReason, eventMessage(k, kind, g))
	}
	if g != nil && kind == KillContainer {
		p.logLargest(g)
	}
	return true
}

// killKind is which limit the kill met: the node's, the container's own
// (its cgroup or a cgroup below it), one above it (the pod's), or a limit
// the kernel did not name.
func (p *Plugin) killKind(k kmsg.Kill, a attribution) string {
	oom := k.OOMMemcg
	if a.cgroup != "" {
		for _, r := range k.Readings { // the reading of the victim's cgroup
			if r.Task == a.cgroup {
				oom = r.OOM
			}
		}
	}
	switch {
	case k.Global():
		return KillNode
	case oom == "":
		return KillLimit
	case a.known && p.idAt(oom) == a.id:
		return KillContainer
	}
	return KillParent
}

// predicted compares a global OOM's victim with the doctor's model (the
// highest oom_badness dies first): no process left may outrank what the
// victim held when the kernel chose it.
func (p *Plugin) predicted(k kmsg.Kill) []any {
	n := p.node.Load()
	total, err := n.TotalPages()
	var first kernel.Process
	var firstBadness int64
	var found bool
	if err == nil {
		first, firstBadness, found, err = n.FirstVictim(k.Pid)
	}
	if err != nil {
		p.m.predictions.WithLabelValues("unknown").Inc()
		return []any{"model_predicted", "unknown"}
	}
	victim := kernel.Badness(int64(k.RSSKiB+k.PgTablesKiB), k.ScoreAdj, total)
	if !found || victim+kernel.CounterSlack(runtime.NumCPU()) >= firstBadness {
		p.m.predictions.WithLabelValues("true").Inc()
		return []any{"model_predicted", true}
	}
	p.m.predictions.WithLabelValues("false").Inc()
	return []any{"model_predicted", false, "model_first", fmt.Sprintf("%s[%d]", escape.Terminal(first.Comm), first.Pid),
		"model_first_oom_score_adj", first.OOMScoreAdj, "model_first_kb", first.MemKB - first.FileKB}
}

// eventMessage says what happened as a Pod's Event.
func eventMessage(k kmsg.Kill, kind string, g *guard) string {
	why := map[string]string{KillContainer: "its container's memory limit", KillParent: "a memory limit above its container (the pod's)",
		KillLimit: "a memory limit", KillNode: "the node running out of memory"}[kind]
	msg := fmt.Sprintf("process %d (%s) was killed by the OOM killer for %s, at oom_score_adj %d with %d KiB", k.Pid, escape.Terminal(k.Comm), why, k.ScoreAdj, k.RSSKiB)
	if g != nil && g.plan.Group != nil && !*g.plan.Group {
		msg += "; the container kept running because memory.oom.group is 0"
	}
	return msg
}

// logLargest logs a guarded container's largest processes: the kernel's
// task dump, which the console fix turns off, for the one container.
func (p *Plugin) logLargest(g *guard) {
	c, err := p.container(g, "oom")
	if err != nil {
		return
	}
	procs, err := c.Largest(largestTasks)
	if err != nil || len(procs) == 0 {
		return
	}
	var b strings.Builder
	for i, pr := range procs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s %dkB oom_score_adj %d", pr.Pid, escape.Terminal(pr.Comm), pr.MemKB, pr.OOMScoreAdj)
	}
	p.log.Info("largest processes after the OOM kill", g.attrs("processes", b.String())...)
}

// lostQuiet is how long the log must hold no record unread before the
// kills whose records were overwritten are told: every record left has
// been read then, and the counts hold those kills beside the ones told.
const lostQuiet = 50 * time.Millisecond

// lostWait bounds the wait for that quiet: after it, the kills lost are
// told once a record read is one just logged.
var lostWait = 5 * time.Second

// kmsgRead is one Read's result.
type kmsgRead struct {
	rec kmsg.Record
	err error
}

// lostTally is what the counts say of the kills whose records were lost.
type lostTally struct {
	node    uint64
	nodeErr error
	counts  map[string]uint64 // every counted container's, as read
	losses  []containerLoss   // the containers whose count holds kills not reported
	inPods  uint64            // their sum
	unsure  []containerLoss   // the containers whose count may lack kills (counts.unsure)
}

// containerLoss is a container's kills whose records were lost.
type containerLoss struct {
	id   string
	info ctrInfo
	n    uint64
}

// holders are the containers whose count holds kills not reported, or
// may (unsure).
func (t lostTally) holders() []containerLoss {
	var out []containerLoss
	for _, l := range slices.Concat(t.losses, t.unsure) {
		if !slices.ContainsFunc(out, func(h containerLoss) bool { return h.id == l.id }) {
			out = append(out, l)
		}
	}
	return out
}

// holding are the holders' ids.
func (t lostTally) holding() []string {
	var ids []string
	for _, l := range t.holders() {
		ids = append(ids, l.id)
	}
	return ids
}

// countLost reads the counts, the node's and every container's, once the
// log is read up to now: a container's count beyond the kills reported
// there holds kills whose records were lost.
func (p *Plugin) countLost() lostTally {
	t := lostTally{counts: map[string]uint64{}}
	t.node, t.nodeErr = kernel.NodeOOMKills(p.root)
	ids := p.countedIDs()
	r := p.readCounts(ids)
	for _, id := range ids {
		n, ok := r.n[id]
		if !ok {
			continue
		}
		t.counts[id] = n
		c, still := p.reg.info(id)
		if still && n > c.base+c.reported {
			t.losses = append(t.losses, containerLoss{id, c, n - c.base - c.reported})
			t.inPods += n - c.base - c.reported
		}
		if still && p.counts.isUnsure(id) {
			t.unsure = append(t.unsure, containerLoss{id: id, info: c})
		}
	}
	return t
}

// tellLost tells the kills whose records the kernel overwrote: by
// container, the kills each count holds beyond those reported there, when
// the node's count (every kill since the books opened, less those read)
// says nothing else is in them and every kill read was told with its
// container; otherwise their number, with the containers they may have
// been in. The books start anew from the counts read. A kill the kernel
// counted and had not logged yet as they were read (it counts first), or
// logged and not read yet (past lostWait), is told twice, once here.
func (p *Plugin) tellLost(t lostTally, book *killBook) {
	node, nodeErr, losses, inPods := t.node, t.nodeErr, t.losses, t.inPods
	all, exact, outsideToo := inPods, false, true
	placed := book.attributed + book.gone(t.holding()) // the kills read that no count holds
	if nodeErr == nil && book.ok && node >= book.base {
		since := node - book.base
		all = since - min(book.seen, since)
		outsideToo = since-min(placed, since) > inPods
		// A kill told without its container may be in some count; a count that may lack kills cannot tell.
		exact = inPods <= all && book.seen == placed && len(t.unsure) == 0
	}
	const msg = "OOM kills whose kernel records were overwritten before oomguard read them"
	switch {
	case !exact && all > 0:
		var names []string
		for _, l := range t.holders() {
			names = append(names, escape.Terminal(l.info.namespace+"/"+l.info.pod+"/"+l.info.name))
		}
		if outsideToo {
			names = append(names, "//"+outside.name)
		}
		p.m.unattributed.WithLabelValues(KillUnknown).Add(float64(all))
		// Why not by container: the containers' counts against the node's, and kills read that no count could place.
		p.log.Warn(msg, "kills", all, "kind", KillUnknown, "attributed", false, "candidates", strings.Join(names, ", "),
			"in_containers", inPods, "read_unplaced", book.seen-min(placed, book.seen))
	case exact:
		for _, l := range losses {
			p.m.kills.WithLabelValues(l.info.namespace, l.info.pod, l.info.name, KillUnknown).Add(float64(l.n))
			p.log.Warn(msg, "pod", l.info.namespace+"/"+l.info.pod, "container", l.info.name, "kills", l.n, "kind", KillUnknown)
			for i := uint64(0); p.events != nil && i < min(l.n, maxLostEvents); i++ {
				p.events.Warning(podevents.Pod{Namespace: l.info.namespace, Name: l.info.pod, UID: l.info.podUID}, l.info.name, EventReason, lostMessage)
			}
		}
		if outside := all - inPods; outside > 0 {
			p.m.kills.WithLabelValues("", "", "", KillUnknown).Add(float64(outside))
			p.log.Warn(msg, "kills", outside, "kind", KillUnknown, "outside_every_pod", true)
		}
	}
	p.restart(book, t)
}

// maxLostEvents bounds the Events one loss raises a container's count by.
const maxLostEvents = 1000

// lostMessage is the Event of a kill whose record the kernel overwrote.
const lostMessage = "a process was killed by the OOM killer; the kernel's record of it was overwritten before oomguard read it, so which process and which limit are unknown"

// rebase starts the books anew after the kernel overwrote records it
// cannot wait to read past: the kills among them can never be reported.
func (p *Plugin) rebase(book *killBook) { p.restart(book, p.countLost()) }

// restart opens the books at the counts read: the node's, and the
// containers' (those not read keep theirs).
func (p *Plugin) restart(book *killBook, t lostTally) {
	*book = killBook{base: t.node, ok: t.nodeErr == nil}
	var read []string
	for id, n := range t.counts {
		if p.reg.update(id, func(rec *record) { rec.info.base, rec.info.reported = n, 0 }) {
			read = append(read, id)
		}
	}
	p.counts.sure(read)
}

// countFrom records the container's memory.events oom_kill as its baseline,
// once: kills counted before are not the plugin's to report.
func (p *Plugin) countFrom(id string) {
	n, ok := p.oomKillCount(id)
	if !ok {
		return
	}
	fresh := false
	p.reg.update(id, func(rec *record) {
		if fresh = !rec.info.counted; fresh {
			rec.info.base, rec.info.counted = n, true
		}
	})
	if fresh {
		p.counts.add(id)
	}
}

// oomKillCount is the kills the kernel counted in the container (v1 and v2).
func (p *Plugin) oomKillCount(id string) (uint64, bool) {
	n, ok := p.readCounts([]string{id}).n[id]
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
func (p *Plugin) readCounts(ids []string) countRead {
	r := countRead{n: make(map[string]uint64, len(ids))}
	before, err1 := kernel.NodeOOMKills(p.root)
	type walked struct {
		id   string
		each []kernel.CgroupKills
	}
	var trees []walked
	v2 := p.node.Load().Mode() == kernel.ModeV2
	for _, id := range ids {
		ctr, ok := p.locate(id)
		if !ok {
			continue
		}
		if v2 {
			if n, err := ctr.OOMKills(); err == nil {
				r.n[id] = n
			}
			continue
		}
		if each, err := ctr.OOMKillsByCgroup(); err == nil {
			trees = append(trees, walked{id, each})
		}
	}
	after, err2 := kernel.NodeOOMKills(p.root)
	r.before, r.after, r.nodeOK = before, after, err1 == nil && err2 == nil
	for _, t := range trees {
		r.n[t.id] = p.counts.follow(t.id, t.each, r)
	}
	var short []string
	for id, n := range r.n {
		if c, ok := p.reg.info(id); ok && c.counted && n < c.base+c.reported {
			short = append(short, id)
		}
	}
	for _, id := range short {
		p.counts.markUnsure(id)
	}
	return r
}

// refresh reads the count of a container a kill was just told in, on
// cgroup v1: the cgroup cg it was counted in is read while it is there,
// and one gone already took the kill out of the count (counts.toldIn).
func (p *Plugin) refresh(id, cg string) {
	if p.node.Load().Mode() == kernel.ModeV2 {
		return
	}
	ctr, ok := p.locate(id)
	if !ok {
		return
	}
	if _, ok := p.readCounts([]string{id}).n[id]; !ok || cg == "" {
		return
	}
	if top := ctr.Cgroup(); cg != top && strings.HasPrefix(cg, top+"/") {
		p.counts.toldIn(id, strings.TrimPrefix(cg, top))
	}
}

// settle sets the books of the containers whose counts may lack kills at
// their counts, once no kill is in flight: every kill the node counted
// read and told, and none counted while their counts were read. Their
// kills told unsure stay told, and leave their counts.
func (p *Plugin) settle(book *killBook) {
	ids := p.counts.unsure()
	if len(ids) == 0 || !book.ok {
		return
	}
	r := p.readCounts(ids)
	if !r.nodeOK || r.before != r.after || r.after != book.base+book.seen {
		return
	}
	var read []string
	for id, n := range r.n {
		settled := false
		p.reg.update(id, func(rec *record) {
			if settled = rec.info.counted; settled {
				rec.info.base, rec.info.reported = n, 0
			}
		})
		if settled {
			read = append(read, id)
		}
	}
	p.counts.sure(read)
}

// locate is the cgroup of a container the runtime told of.
func (p *Plugin) locate(id string) (*enforce.Container, bool) {
	c, ok := p.reg.info(id)
	if !ok || c.cgroupsPath == "" && c.pid == 0 {
		return nil, false
	}
	ctr, err := p.node.Load().Locate(c.cgroupsPath, int(c.pid))
	return ctr, err == nil
}

// forget drops a removed container's series: labels by container keep the
// series count to the node's containers that were OOM-killed in.
func (m *Metrics) forget(info ctrInfo) {
	m.kills.DeletePartialMatch(prometheus.Labels{"namespace": info.namespace, "pod": info.pod, "container": info.name})
}
