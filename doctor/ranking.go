package doctor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"
)

// rankingAssumes is what checkRanking's model takes for granted; the report
// says it.
const rankingAssumes = "model: the runaway is the container's biggest process, at its own oom_score_adj; it grows by what the container may still take " +
	"(its effective memory limit less usage, or the node's available memory when that is less); everything else stays as it is; " +
	"the kernel kills the highest oom_badness (resident + swap + page tables + oom_score_adj × totalpages / 1000) first, and again until the runaway dies"

// runaway is one container's biggest process, grown as far as it may.
type runaway struct {
	proc      *kernel.Process
	pod, id   string
	canFill   bool              // it runs the node out of memory before a limit stops it
	limitedBy string            // the cgroup whose limit stops it, if one does
	badness   int64             // grown
	before    []*kernel.Process // killed before it, in the kernel's order
	daemons   int               // node daemons among them
}

// checkRanking: who dies in a global OOM. For each container, a runaway in
// it that can fill the node makes the kernel kill, one after another, every
// process whose oom_badness is above the runaway's grown one: when a node
// daemon is among them, the node goes down before the pod does.
func (n *node) checkRanking() Finding {
	f := Finding{Check: "oom-ranking"}
	if n.memErr != nil {
		f.Severity, f.Summary = Unknown, fmt.Sprintf("cannot read the node's memory: %v", n.memErr)
		return f
	}
	total := n.mem.TotalPages()
	avail := n.mem.AvailableKB / kernel.PageKB
	biggest := map[string]*runaway{}
	var killable []*kernel.Process
	for i := range n.procs {
		p := &n.procs[i]
		if !n.killable(p) {
			continue
		}
		killable = append(killable, p)
		pod, cg, id, ok := n.containerOf(p)
		if !ok {
			continue
		}
		if r := biggest[cg]; r == nil || p.MemKB > r.proc.MemKB || (p.MemKB == r.proc.MemKB && p.OOMScoreAdj > r.proc.OOMScoreAdj) {
			biggest[cg] = &runaway{proc: p, pod: pod, id: id}
		}
	}
	if len(biggest) == 0 {
		f.Severity, f.Summary = Info, "no pod processes on this node: nothing to rank"
		return f
	}
	badness := func(p *kernel.Process) int64 { return kernel.Badness(p.MemKB, p.OOMScoreAdj, total) }
	sort.SliceStable(killable, func(i, j int) bool { return badness(killable[i]) > badness(killable[j]) })
	// daemonsUpTo[i]: node daemons among the i processes the kernel kills first.
	daemonsUpTo := make([]int, len(killable)+1)
	for i, p := range killable {
		daemonsUpTo[i+1] = daemonsUpTo[i]
		if n.isDaemon(p) {
			daemonsUpTo[i+1]++
		}
	}
	cgs := make([]string, 0, len(biggest))
	for cg := range biggest {
		cgs = append(cgs, cg)
	}
	sort.Strings(cgs)
	var limits int64
	var unlimited, fill int
	var worst *runaway
	var unknown []string
	for _, cg := range cgs {
		r := biggest[cg]
		headroom, by, limited, err := kernel.MemoryHeadroom(n.root, n.mode, cg)
		if err != nil {
			unknown = append(unknown, fmt.Sprintf("%s: %v", n.ctrDesc(r.pod, r.id), err))
			continue
		}
		if lim, ok := kernel.MemoryLimit(n.root, n.mode, cg); ok {
			limits += lim
		} else {
			unlimited++
		}
		grow := avail
		r.canFill = !limited || headroom/(kernel.PageKB*1024) >= avail
		if !r.canFill {
			r.limitedBy = by
			continue
		}
		fill++
		r.badness = badness(r.proc) + grow
		k := sort.Search(len(killable), func(i int) bool { return badness(killable[i]) <= r.badness })
		r.before, r.daemons = killable[:k], daemonsUpTo[k]
		if worst == nil || r.daemons > worst.daemons {
			worst = r
		}
	}
	f.Details = append(f.Details, fmt.Sprintf("node: %s RAM + %s swap, %s available; containers' memory limits sum to %s (%.2f× RAM), %d containers without one",
		gib(n.mem.TotalKB), gib(n.mem.SwapKB), gib(n.mem.AvailableKB), gib(limits/1024), float64(limits/1024)/float64(n.mem.TotalKB), unlimited))
	f.Details = append(f.Details, rankingAssumes)
	f.Details = append(f.Details, unknown...)
	daemons := 0
	if worst != nil {
		daemons = worst.daemons
	}
	f.Metric = &metric{Name: "oomguard_doctor_daemons_outranking_pods", Value: float64(daemons), Help: daemonsOutrankingHelp}
	switch {
	case daemons > 0:
		f.Severity = Critical
		f.Summary = fmt.Sprintf("a runaway in %s (%s, oom_score_adj %+d) can fill the node; the kernel would kill %d node daemons before it: %s",
			n.ctrDesc(worst.pod, worst.id), worst.proc.Comm, worst.proc.OOMScoreAdj, daemons, strings.Join(n.daemonNames(worst.before), ", "))
		for _, cg := range cgs {
			if r := biggest[cg]; r.canFill && r.daemons > 0 {
				f.Details = append(f.Details, fmt.Sprintf("%s: %s[%d] adj %+d; killed before it, in order: %s",
					n.ctrDesc(r.pod, r.id), r.proc.Comm, r.proc.Pid, r.proc.OOMScoreAdj, strings.Join(n.killOrder(r.before), ", ")))
			}
		}
		f.Fix = "give pod processes a high oom_score_adj (oomguard-nri or oomguard-hook with a rule, or oomguard-init in the image), and limit containers below what the node has: kubelet's -997 for Guaranteed pods puts their runaways below every daemon"
	case len(unknown) > 0:
		f.Severity, f.Summary = Unknown, "could not read the memory limits of some containers"
	case fill == 0:
		f.Severity, f.Summary = OK, fmt.Sprintf("none of %d containers can fill the node: each meets its own memory limit first", len(cgs))
	default:
		f.Severity, f.Summary = OK, fmt.Sprintf("%d of %d containers can fill the node, and the kernel would kill each one's runaway before any node daemon", fill, len(cgs))
	}
	return f
}

// shown is how many processes a kill order names before "and N more".
const shown = 12

func (n *node) daemonNames(ps []*kernel.Process) []string {
	var out []string
	more := 0
	for _, p := range ps {
		switch {
		case !n.isDaemon(p):
		case len(out) < shown:
			out = append(out, fmt.Sprintf("%s[%d]", p.Comm, p.Pid))
		default:
			more++
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("and %d more", more))
	}
	return out
}

// killOrder names the processes killed before a runaway, pods' by pod.
func (n *node) killOrder(ps []*kernel.Process) []string {
	var out []string
	for _, p := range ps[:min(len(ps), shown)] {
		if pod, _, _, ok := n.containerOf(p); ok {
			out = append(out, fmt.Sprintf("%s[%d] (pod %s)", p.Comm, p.Pid, pod))
		} else {
			out = append(out, fmt.Sprintf("%s[%d]", p.Comm, p.Pid))
		}
	}
	if len(ps) > shown {
		out = append(out, fmt.Sprintf("and %d more", len(ps)-shown))
	}
	return out
}

func gib(kb int64) string { return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20)) }
