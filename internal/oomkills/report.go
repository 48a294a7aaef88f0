package oomkills

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/escape"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/podevents"
)

// reportKill says whose process the kernel killed, and how (attribute.go
// says from what); it reports whether it could tell. A kill that could be
// in more than one container is reported unattributed, with them, and no
// Event is sent for it.
func (r *Reporter) reportKill(k kmsg.Kill, book *killBook, how replay) bool {
	if k.Again { // the kernel counted a process twice: so does the book
		if how != live { // the books were opened after it
			return false
		}
		pl, ok := book.placeOf(k.Pid)
		id := pl.id
		known := r.ctrs.UpdateBooks(id, func(b *Books) {
			if ok {
				b.Reported++
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
	a := r.attribute(k, book, how == live)
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
	kind := r.killKind(k, a)
	if a.known && how == live {
		r.ctrs.UpdateBooks(a.id, func(b *Books) { b.Reported++ })
		r.refresh(a.id, a.cgroup)
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
		r.m.killLag.Observe(lag.Seconds())
		attrs = append(attrs, "reported_after", lag.Round(time.Millisecond))
	}
	switch {
	case a.member:
		attrs = append(attrs, "oom_group_member", true)
	case k.GroupOf != "": // killed while the kernel killed a group: maybe its member, not the kernel's choice
		attrs = append(attrs, "oom_group_of", escape.Terminal(k.GroupOf))
	case kind == KillNode:
		attrs = append(attrs, r.predicted(k)...)
	}
	if len(k.MayRepeat) > 0 { // its own kill, or one of these again through a thread gone from /proc
		pids := make([]string, len(k.MayRepeat))
		for i, pid := range k.MayRepeat {
			pids[i] = strconv.Itoa(pid)
		}
		attrs = append(attrs, "maybe_repeat_of", strings.Join(pids, ","))
	}
	if a.by == byNone { // caught up on, and nothing left tells whose
		r.m.unattributed.WithLabelValues(kind).Inc()
		r.log.Warn("OOM kill", append(attrs, "attributed", false, "candidates", "(unknown: it came while no oomguard-nri read the kernel log, and its record names no cgroup)")...)
		return false
	}
	if a.unsure() {
		names := make([]string, len(a.candidates))
		for i, c := range a.candidates {
			names[i] = escape.Terminal(c.Namespace + "/" + c.Pod + "/" + c.Name)
		}
		r.m.unattributed.WithLabelValues(kind).Inc()
		r.log.Warn("OOM kill", append(attrs, "attributed", false, "candidates", strings.Join(names, ", "))...)
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
			r.m.daemonKills.WithLabelValues(kind).Inc()
		} else {
			r.m.kills.WithLabelValues("", "", "", kind).Inc()
		}
		r.log.Warn("OOM kill", append(attrs, "node_daemon", daemon)...)
		return true
	}
	c := a.info
	r.m.kills.WithLabelValues(c.Namespace, c.Pod, c.Name, kind).Inc()
	attrs = append([]any{"pod", c.Namespace + "/" + c.Pod, "container", c.Name}, attrs...)
	if c.KeptRunning {
		attrs = append(attrs, "container_kept_running", true)
	}
	r.log.Warn("OOM kill", attrs...)
	if r.events != nil {
		r.events.Warning(podevents.Pod{Namespace: c.Namespace, Name: c.Pod, UID: c.PodUID}, c.Name, EventReason, eventMessage(k, kind, c.KeptRunning))
	}
	if r.largest != nil && kind == KillContainer {
		r.largest(a.id)
	}
	return true
}

// killKind is which limit the kill met: the node's, the container's own
// (its cgroup or a cgroup below it), one above it (the pod's), or a limit
// the kernel did not name.
func (r *Reporter) killKind(k kmsg.Kill, a attribution) string {
	oom := k.OOMMemcg
	if a.cgroup != "" {
		for _, rd := range k.Readings { // the reading of the victim's cgroup
			if rd.Task == a.cgroup {
				oom = rd.OOM
			}
		}
	}
	switch {
	case k.Global():
		return KillNode
	case oom == "":
		return KillLimit
	case a.known && r.idAt(oom) == a.id:
		return KillContainer
	}
	return KillParent
}

// predicted compares a global OOM's victim with the doctor's model (the
// highest oom_badness dies first): no process left may outrank what the
// victim held when the kernel chose it.
func (r *Reporter) predicted(k kmsg.Kill) []any {
	n := r.node()
	total, err := n.TotalPages()
	var first kernel.Process
	var firstBadness int64
	var found bool
	if err == nil {
		first, firstBadness, found, err = n.FirstVictim(k.Pid)
	}
	if err != nil {
		r.m.predictions.WithLabelValues("unknown").Inc()
		return []any{"model_predicted", "unknown"}
	}
	victim := kernel.Badness(int64(k.RSSKiB+k.PgTablesKiB), k.ScoreAdj, total)
	if !found || victim+kernel.CounterSlack(runtime.NumCPU()) >= firstBadness {
		r.m.predictions.WithLabelValues("true").Inc()
		return []any{"model_predicted", true}
	}
	r.m.predictions.WithLabelValues("false").Inc()
	return []any{"model_predicted", false, "model_first", fmt.Sprintf("%s[%d]", escape.Terminal(first.Comm), first.Pid),
		"model_first_oom_score_adj", first.OOMScoreAdj, "model_first_kb", first.MemKB - first.FileKB}
}

// eventMessage says what happened as a Pod's Event.
func eventMessage(k kmsg.Kill, kind string, keptRunning bool) string {
	why := map[string]string{KillContainer: "its container's memory limit", KillParent: "a memory limit above its container (the pod's)",
		KillLimit: "a memory limit", KillNode: "the node running out of memory"}[kind]
	msg := fmt.Sprintf("process %d (%s) was killed by the OOM killer for %s, at oom_score_adj %d with %d KiB", k.Pid, escape.Terminal(k.Comm), why, k.ScoreAdj, k.RSSKiB)
	if keptRunning {
		msg += "; the container kept running because memory.oom.group is 0"
	}
	return msg
}
