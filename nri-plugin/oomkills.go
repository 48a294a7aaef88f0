package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oomguard/oomguard/internal/escape"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/podevents"
)

// kmsgSource is the kernel's log (kmsg.Reader), or a test's.
type kmsgSource interface {
	Read() (kmsg.Record, error)
	Close() error
}

func openKmsg() (kmsgSource, error) { return kmsg.Open("/dev/kmsg") }

// Kinds of OOM kill, as reported.
const (
	KillContainer = "container" // the container's own memory limit
	KillParent    = "parent"    // a limit above it: its pod's, its QoS class's
	KillLimit     = "limit"     // a memory limit; which one, the kernel did not say (its rate limit)
	KillNode      = "node"      // the node ran out (a global OOM)
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
func (p *Plugin) watchKills(ctx context.Context, open func() (kmsgSource, error)) {
	src, err := open()
	if err != nil {
		p.log.Warn("not reading the kernel log; OOM kills in guarded containers are counted at each verification only", "err", err)
		return
	}
	go func() { <-ctx.Done(); src.Close() }()
	var parser kmsg.Parser
	for ctx.Err() == nil {
		rec, err := src.Read()
		switch {
		case errors.Is(err, kmsg.ErrLost):
			p.m.kmsgLost.Inc()
			p.log.Warn("kernel log records were overwritten before oomguard read them; OOM kills among them are not reported (guarded containers' are still counted from memory.events)")
			continue
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("reading the kernel log failed; OOM kills are no longer reported as they happen", "err", err)
			}
			return
		}
		if k, ok := parser.Feed(rec); ok {
			p.reportKill(k)
		}
	}
}

// reportKill says whose process the kernel killed, and how. The kernel
// rate-limits the record naming the cgroups (ten in five seconds) but not
// the "Killed process" one: a kill without cgroups is found by the
// container whose memory.events counted a kill not yet reported.
func (p *Plugin) reportKill(k kmsg.Kill) {
	kind := KillParent
	var id string
	var info ctrInfo
	var known bool
	if k.TaskMemcg != "" {
		id, info, known = p.containerOf(k.TaskMemcg)
	} else {
		id, info, known = p.containerCounting()
	}
	switch {
	case k.Global():
		kind = KillNode
	case k.OOMMemcg == "":
		kind = KillLimit
	case known && containerIDIn(k.OOMMemcg) == id:
		kind = KillContainer
	}
	if known {
		p.mu.Lock()
		if c, ok := p.known[id]; ok {
			c.reported++
			p.known[id] = c
		}
		p.mu.Unlock()
	}
	attrs := []any{"pid", k.Pid, "command", escape.Terminal(k.Comm), "oom_score_adj", k.ScoreAdj, "rss_kb", k.RSSKiB,
		"kind", kind, "cgroup", escape.Terminal(k.TaskMemcg), "kernel_time", k.Time.Round(time.Millisecond)}
	if now := kmsg.Now(); now > 0 {
		lag := max(0, now-k.Time) // the kernel's clock runs a hair ahead
		p.m.killLag.Observe(lag.Seconds())
		attrs = append(attrs, "reported_after", lag.Round(time.Millisecond))
	}
	switch {
	case k.Group:
		attrs = append(attrs, "oom_group_member", true)
	case kind == KillNode:
		attrs = append(attrs, p.predicted(k)...)
	}
	if !known {
		// Outside every pod: a cgroup not kubelet's, or, unnamed, a node
		// OOM's victim no container counted.
		daemon := k.TaskMemcg != "" && !strings.Contains(k.TaskMemcg, "kubepods") || k.TaskMemcg == "" && k.Global()
		if daemon {
			p.m.daemonKills.WithLabelValues(kind).Inc()
		} else {
			p.m.kills.WithLabelValues("", "", "", kind).Inc()
		}
		p.log.Warn("OOM kill", append(attrs, "node_daemon", daemon)...)
		return
	}
	p.m.kills.WithLabelValues(info.namespace, info.pod, info.name, kind).Inc()
	attrs = append([]any{"pod", info.namespace + "/" + info.pod, "container", info.name}, attrs...)
	p.mu.Lock()
	g := p.guarded[id]
	p.mu.Unlock()
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
	if !found || victim >= firstBadness {
		p.m.predictions.WithLabelValues("true").Inc()
		return []any{"model_predicted", true}
	}
	p.m.predictions.WithLabelValues("false").Inc()
	return []any{"model_predicted", false, "model_first", fmt.Sprintf("%s[%d]", escape.Terminal(first.Comm), first.Pid),
		"model_first_oom_score_adj", first.OOMScoreAdj, "model_first_kb", first.MemKB}
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

// containerCounting is the container whose memory.events counts more OOM
// kills than were reported in it since the plugin first looked.
func (p *Plugin) containerCounting() (string, ctrInfo, bool) {
	p.mu.Lock()
	ids := make([]string, 0, len(p.known))
	for id, c := range p.known {
		if c.counted {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		n, ok := p.oomKillCount(id)
		p.mu.Lock()
		c, still := p.known[id]
		p.mu.Unlock()
		if ok && still && n > c.base+c.reported {
			return id, c, true
		}
	}
	return "", ctrInfo{}, false
}

// countFrom records the container's memory.events oom_kill as its baseline,
// once: kills counted before are not the plugin's to report.
func (p *Plugin) countFrom(id string) {
	n, ok := p.oomKillCount(id)
	if !ok {
		return
	}
	p.mu.Lock()
	if c, known := p.known[id]; known && !c.counted {
		c.base, c.counted = n, true
		p.known[id] = c
	}
	p.mu.Unlock()
}

// oomKillCount reads the container's memory.events oom_kill (cgroup v2).
func (p *Plugin) oomKillCount(id string) (uint64, bool) {
	p.mu.Lock()
	c, ok := p.known[id]
	p.mu.Unlock()
	if !ok || c.cgroupsPath == "" && c.pid == 0 {
		return 0, false
	}
	ctr, err := p.node.Load().Locate(c.cgroupsPath, int(c.pid))
	if err != nil {
		return 0, false
	}
	ev, err := ctr.MemoryEvents()
	if err != nil {
		return 0, false
	}
	return ev["oom_kill"], true
}

// containerOf is the container whose cgroup holds cg, among those the
// runtime told of.
func (p *Plugin) containerOf(cg string) (string, ctrInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range idsIn(cg) {
		if info, ok := p.known[id]; ok {
			return id, info, true
		}
	}
	return "", ctrInfo{}, false
}

// containerIDIn is the container ID the last element of cg names, if any.
func containerIDIn(cg string) string {
	i := strings.LastIndexByte(cg, '/')
	return trimRuntime(cg[i+1:])
}

// idsIn lists what each element of cg would be as a container ID, the
// deepest first: kubelet's and the runtimes' cgroup names end in the
// container's ID ("ID", "cri-containerd-ID.scope", "crio-ID"), and its
// processes may be below it.
func idsIn(cg string) []string {
	var out []string
	for cg != "" && cg != "/" {
		i := strings.LastIndexByte(cg, '/')
		out = append(out, trimRuntime(cg[i+1:]))
		if i < 0 {
			break
		}
		cg = cg[:i]
	}
	return out
}

func trimRuntime(base string) string {
	base = strings.TrimSuffix(base, ".scope")
	for _, pre := range []string{"cri-containerd-", "crio-", "docker-", "libpod-"} {
		base = strings.TrimPrefix(base, pre)
	}
	return base
}

// forget drops a removed container's series: labels by container keep the
// series count to the node's containers that were OOM-killed in.
func (m *Metrics) forget(info ctrInfo) {
	m.kills.DeletePartialMatch(prometheus.Labels{"namespace": info.namespace, "pod": info.pod, "container": info.name})
}
