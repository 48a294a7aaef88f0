// Package enforce is the one door through which oomguard changes the kernel:
// a decision, masked once against what the node supports (a Plan), applied
// to one container's own cgroup and the processes in it (a Container that
// Locate found and checked), each write reading first, writing only what
// differs, and saying what it did (a Change). The hook, the plugin's create,
// start, Synchronize and verify paths, their log lines and their metrics all
// go through it.
package enforce

import (
	"fmt"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/policy"
)

// Node is a node's filesystem root as oomguard writes to it: its cgroup
// layout, how deep the reader's cgroup namespace is, and the cgroups whose
// children are containers besides kubelet's pods.
type Node struct {
	root    string
	mode    kernel.Mode
	nsDepth int
	parents []string
}

// NewNode reads root's cgroup layout once; parents are
// containment.cgroup_parents.
func NewNode(root string, parents []string) *Node {
	mode := kernel.DetectMode(root)
	return &Node{root: root, mode: mode, nsDepth: kernel.CgroupNSDepth(root, mode), parents: parents}
}

// Layout is the node's cgroup layout, for logs: v1, hybrid, v2 or unknown.
func (n *Node) Layout() string { return n.mode.String() }

// Mode is the node's cgroup layout.
func (n *Node) Mode() kernel.Mode { return n.mode }

// Plan is a decision as the node can apply it.
type Plan struct {
	Rule  string
	Score *int
	Group *bool
	// Dropped says why the decision's group is not in the plan.
	Dropped string
}

// Plan masks a decision against what the node supports: memory.oom.group
// exists on cgroup v2 only, and runc refuses a unified resource elsewhere.
func (n *Node) Plan(d policy.Decision) Plan {
	p := Plan{Rule: d.Rule, Score: d.OOMScoreAdj, Group: d.OOMGroup}
	if p.Group != nil && n.mode != kernel.ModeV2 {
		p.Group, p.Dropped = nil, unsupported(n.mode)
	}
	return p
}

func unsupported(m kernel.Mode) string {
	switch m {
	case kernel.ModeV1:
		return "unsupported on cgroup v1"
	case kernel.ModeHybrid:
		return "unsupported on cgroup v1 (hybrid)"
	}
	return "unsupported: no cgroup filesystem"
}

// Changes reports whether the plan sets anything.
func (p Plan) Changes() bool { return p.Score != nil || p.Group != nil }

// ScoreChange is what the plan does to a score the runtime would set (from;
// nil when unknown), for the decision's log line.
func (p Plan) ScoreChange(from *int) Change {
	c := Change{Setting: SettingScore, What: Left}
	if p.Score != nil {
		c.What, c.To = Planned, itoa(*p.Score)
		if from != nil {
			c.From = itoa(*from)
		}
	}
	return c
}

// GroupChange is what the plan does to a group flag the runtime would set.
func (p Plan) GroupChange(from *bool) Change {
	c := Change{Setting: SettingGroup, What: Left}
	switch {
	case p.Dropped != "":
		c.What, c.Why = Unsupported, p.Dropped
	case p.Group != nil:
		c.What, c.To = Planned, kernel.GroupValue(*p.Group)
		if from != nil {
			c.From = kernel.GroupValue(*from)
		}
	}
	return c
}

// GroupValue is how memory.oom.group and a unified cgroup resource write b.
func GroupValue(b bool) string { return kernel.GroupValue(b) }

// Apply applies the plan to the container whose init is pid, before it runs
// its command (the hook's moment): the score of that process, the group of
// the cgroup its spec names (cgroupsPath, else the pid's). It returns what
// became of each setting, and why any failed.
func (n *Node) Apply(p Plan, cgroupsPath string, pid int) (score, group Change, err error) {
	score, group = p.ScoreChange(nil), p.GroupChange(nil)
	if !p.Changes() {
		return score, group, nil
	}
	c, err := n.Locate(cgroupsPath, pid)
	if err == nil {
		err = c.Holds(pid)
	}
	if err != nil {
		err = fmt.Errorf("refusing to write: %w", err)
		if p.Score != nil {
			score.What, score.Err = Refused, err
		}
		if p.Group != nil {
			group.What, group.Err = Refused, err
		}
		return score, group, err
	}
	if p.Score != nil {
		score = c.Score(pid, *p.Score)
	}
	if p.Group != nil {
		group = c.Group(*p.Group)
	}
	return score, group, joinErr(score.Err, group.Err)
}
