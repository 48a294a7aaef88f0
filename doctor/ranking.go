package doctor

import (
	"fmt"
	"sort"

	"github.com/oomguard/oomguard/internal/kernel"
)

// checkRanking: who dies in a global OOM. The kernel kills the highest
// oom_score first; a node daemon above every pod process dies before them.
func (n *node) checkRanking() Finding {
	f := Finding{Check: "oom-ranking"}
	var top *kernel.Process
	var daemons []*kernel.Process
	for i := range n.procs {
		p := &n.procs[i]
		if !n.killable(p) {
			continue
		}
		if _, _, _, inPod := n.containerOf(p); inPod {
			if top == nil || p.OOMScore > top.OOMScore {
				top = p
			}
		} else if n.isDaemon(p) {
			daemons = append(daemons, p)
		}
	}
	if top == nil {
		f.Severity, f.Summary = Info, "no pod processes on this node: nothing to rank against"
		return f
	}
	sort.Slice(daemons, func(i, j int) bool { return daemons[i].OOMScore > daemons[j].OOMScore })
	var above []string
	for _, d := range daemons {
		if d.OOMScore > top.OOMScore {
			above = append(above, fmt.Sprintf("%s[%d] oom_score %d (adj %+d)", d.Comm, d.Pid, d.OOMScore, d.OOMScoreAdj))
		}
	}
	pod, _, ctr, _ := n.containerOf(top)
	topDesc := fmt.Sprintf("%s[%d] oom_score %d (adj %+d) in pod %s container %s", top.Comm, top.Pid, top.OOMScore, top.OOMScoreAdj, pod, short(ctr))
	f.Metric = &metric{Name: "oomguard_doctor_daemons_outranking_pods", Value: float64(len(above)), Help: "Node daemons a global OOM would kill before any pod process."}
	if len(above) == 0 {
		f.Severity, f.Summary = OK, fmt.Sprintf("every node daemon ranks below the top pod process, %s", topDesc)
		return f
	}
	f.Severity = Critical
	f.Summary = fmt.Sprintf("a global OOM kills %d node daemons before any pod process: the highest pod process is %s", len(above), topDesc)
	f.Details = above
	f.Fix = "give pod processes a high oom_score_adj (oomguard-nri or oomguard-hook with a rule, or oomguard-init in the image); kubelet's -997 for Guaranteed pods puts them below every daemon"
	return f
}
