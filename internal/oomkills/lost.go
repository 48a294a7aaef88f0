package oomkills

import (
	"slices"
	"strings"

	"github.com/oomguard/oomguard/internal/escape"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/podevents"
)

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
	info Container
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
func (r *Reporter) countLost() lostTally {
	t := lostTally{counts: map[string]uint64{}}
	t.node, t.nodeErr = kernel.NodeOOMKills(r.root)
	ids := r.countedIDs()
	read := r.readCounts(ids)
	for _, id := range ids {
		n, ok := read.n[id]
		if !ok {
			continue
		}
		t.counts[id] = n
		c, still := r.ctrs.Container(id)
		if b := c.Books; still && n > b.Base+b.Reported {
			t.losses = append(t.losses, containerLoss{id, c, n - b.Base - b.Reported})
			t.inPods += n - b.Base - b.Reported
		}
		if still && r.counts.isUnsure(id) {
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
func (r *Reporter) tellLost(t lostTally, book *killBook) {
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
			names = append(names, escape.Terminal(l.info.Namespace+"/"+l.info.Pod+"/"+l.info.Name))
		}
		if outsideToo {
			names = append(names, "//"+outside.Name)
		}
		r.m.unattributed.WithLabelValues(KillUnknown).Add(float64(all))
		// Why not by container: the containers' counts against the node's, and kills read that no count could place.
		r.log.Warn(msg, "kills", all, "kind", KillUnknown, "attributed", false, "candidates", strings.Join(names, ", "),
			"in_containers", inPods, "read_unplaced", book.seen-min(placed, book.seen))
	case exact:
		for _, l := range losses {
			c := l.info
			r.m.kills.WithLabelValues(c.Namespace, c.Pod, c.Name, KillUnknown).Add(float64(l.n))
			r.log.Warn(msg, "pod", c.Namespace+"/"+c.Pod, "container", c.Name, "kills", l.n, "kind", KillUnknown)
			for i := uint64(0); r.events != nil && i < min(l.n, maxLostEvents); i++ {
				r.events.Warning(podevents.Pod{Namespace: c.Namespace, Name: c.Pod, UID: c.PodUID}, c.Name, EventReason, lostMessage)
			}
		}
		if outside := all - inPods; outside > 0 {
			r.m.kills.WithLabelValues("", "", "", KillUnknown).Add(float64(outside))
			r.log.Warn(msg, "kills", outside, "kind", KillUnknown, "outside_every_pod", true)
		}
	}
	r.restart(book, t)
}

// maxLostEvents bounds the Events one loss raises a container's count by.
const maxLostEvents = 1000

// lostMessage is the Event of a kill whose record the kernel overwrote.
const lostMessage = "a process was killed by the OOM killer; the kernel's record of it was overwritten before oomguard read it, so which process and which limit are unknown"

// rebase starts the books anew after the kernel overwrote records it
// cannot wait to read past: the kills among them can never be reported.
func (r *Reporter) rebase(book *killBook) { r.restart(book, r.countLost()) }

// restart opens the books at the counts read: the node's, and the
// containers' (those not read keep theirs).
func (r *Reporter) restart(book *killBook, t lostTally) {
	*book = killBook{base: t.node, ok: t.nodeErr == nil}
	var read []string
	for id, n := range t.counts {
		if r.ctrs.UpdateBooks(id, func(b *Books) { b.Base, b.Reported = n, 0 }) {
			read = append(read, id)
		}
	}
	r.counts.sure(read)
}
