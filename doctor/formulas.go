package doctor

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/cri"
	"github.com/oomguard/oomguard/internal/facts"
	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/internal/score"
)

// maxScored bounds the containers checkFormulas asks the runtime about.
const maxScored = 2000

// scoredCtr is one running container under the score formulas.
type scoredCtr struct {
	name           string
	now            int // the score its spec gave its process (kubelet's, or a plugin's)
	linear, log    int
	missing        string // the input the formulas lack, "" when none
	request, limit score.Input
}

// checkFormulas: where each running container would rank among the
// node's in a global OOM, its memory use aside, under kubelet's linear
// Burstable formula and the logarithmic one proposed for large nodes
// (docs/configuration.md, "Scores on large nodes"), from what the runtime
// started it with. On a node of a TiB and more the linear formula gives
// most Burstable containers the same 999.
func (n *node) checkFormulas() (Finding, bool) {
	if n.endpoint == "" {
		return Finding{}, false
	}
	f := Finding{Check: "score-formulas", Severity: Info}
	ctrs, capacity, err := n.scoredContainers()
	if err != nil {
		f.Summary = fmt.Sprintf("containers not scored: %v", err)
		return f, true
	}
	return formulasFinding(ctrs, capacity), true
}

// formulasFinding ranks the containers by the logarithmic formula.
func formulasFinding(ctrs []scoredCtr, capacity score.Input) Finding {
	f := Finding{Check: "score-formulas", Severity: Info}
	if len(ctrs) == 0 {
		f.Summary = "no running containers to score"
		return f
	}
	slices.SortStableFunc(ctrs, func(a, b scoredCtr) int {
		return cmp.Or(cmp.Compare(b.log, a.log), cmp.Compare(b.linear, a.linear), strings.Compare(a.name, b.name))
	})
	linear, log := map[int]int{}, map[int]int{}
	for _, c := range ctrs {
		if c.missing == "" {
			linear[c.linear]++
			log[c.log]++
		}
	}
	at999 := linear[999]
	f.Summary = fmt.Sprintf("%d containers on %s: kubelet's linear formula gives %d distinct scores (%d at 999), the logarithmic one %d; "+
		"killed first, all else equal, is the highest (by the logarithmic formula below)",
		len(ctrs), sizeOf(capacity.Value), len(linear), at999, len(log))
	for i, c := range ctrs {
		if c.missing != "" {
			f.Details = append(f.Details, fmt.Sprintf("-. %s: now %d; not scored: %s", c.name, c.now, c.missing))
			continue
		}
		f.Details = append(f.Details, fmt.Sprintf("%d. %s: logarithmic %d, linear %d, now %d; request %s, limit %s",
			i+1, c.name, c.log, c.linear, c.now, inputSize(c.request), limitSize(c.limit)))
	}
	return f
}

// scoredContainers asks the runtime what it started each running
// container with, and scores it as oomguard-nri would; capacity is the
// node memory the formulas divided by.
func (n *node) scoredContainers() (_ []scoredCtr, capacity score.Input, _ error) {
	pol, err := policy.New(n.cfg)
	if err != nil {
		return nil, capacity, err
	}
	node := facts.Capacity(n.mem, n.memErr)
	capacity = pol.Capacity(node)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := cri.Dial(n.root, n.endpoint)
	if err != nil {
		return nil, capacity, err
	}
	defer c.Close()
	pods, err := c.Sandboxes(ctx)
	if err != nil {
		return nil, capacity, err
	}
	byID := map[string]*cri.Sandbox{}
	for i := range pods {
		byID[pods[i].ID] = &pods[i]
	}
	list, err := c.Containers(ctx)
	if err != nil {
		return nil, capacity, err
	}
	var out []scoredCtr
	for _, ctr := range list {
		pod := byID[ctr.SandboxID]
		if ctr.State != cri.Running || pod == nil || len(out) == maxScored {
			continue
		}
		st, err := c.Status(ctx, ctr.ID)
		if err != nil || st.Spec == nil || st.Spec.Process == nil || st.Spec.Process.OOMScoreAdj == nil || st.Spec.Linux == nil {
			continue
		}
		out = append(out, scoreOf(pol, pod, ctr, st, node))
	}
	return out, capacity, nil
}

// scoreOf scores one container as the plugin's policy reads its inputs.
func scoreOf(pol *policy.Policy, pod *cri.Sandbox, ctr cri.Container, st cri.Status, capacity score.Input) scoredCtr {
	lin := st.Spec.Linux
	var limit *int64
	var unified map[string]string
	if r := lin.Resources; r != nil {
		unified = r.Unified
		if r.Memory != nil {
			limit = r.Memory.Limit
		}
	}
	now := *st.Spec.Process.OOMScoreAdj
	f := policy.Facts{QoS: policy.InferQoS(lin.CgroupsPath, &now), OOMScoreAdj: &now,
		Inputs: facts.Inputs(lin.Resources != nil, limit, unified, pod.Annotations, ctr.Name)}
	f.Inputs.Capacity = capacity
	in := pol.Inputs(&f)
	s := scoredCtr{name: pod.Namespace + "/" + pod.Name + "/" + ctr.Name, now: now, request: in.Request, limit: in.Limit}
	var err error
	if s.linear, err = score.Compute(score.Linear, in, nil); err == nil {
		s.log, err = score.Compute(score.Logarithmic, in, nil)
	}
	if err != nil {
		s.missing = err.Error()
	}
	return s
}

func inputSize(in score.Input) string {
	if !in.Known() {
		return "unknown"
	}
	return sizeOf(in.Value) + " (" + in.From + ")"
}

func limitSize(in score.Input) string {
	if in.Known() && in.Value == 0 {
		return "none"
	}
	return inputSize(in)
}

// sizeOf is bytes as Kubernetes writes them, in the largest binary unit
// that keeps a whole number, or two decimals of GiB and TiB.
func sizeOf(b int64) string {
	units := []struct {
		n    int64
		name string
	}{{1 << 40, "Ti"}, {1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}}
	for _, u := range units {
		if b >= u.n && b%u.n == 0 {
			return fmt.Sprintf("%d%s", b/u.n, u.name)
		}
	}
	for _, u := range units[:2] {
		if b >= u.n {
			return fmt.Sprintf("%.2f%s", float64(b)/float64(u.n), u.name)
		}
	}
	return fmt.Sprintf("%d", b)
}
