package doctor

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"
)

var initRE = regexp.MustCompile(`(^|/)(systemd|init)$`)

// checkGroupKill: containers whose PID 1 is an init and whose effective
// memory.oom.group is 1 die whole for one runaway process.
func (n *node) checkGroupKill() Finding {
	f := Finding{Check: "group-kill"}
	if n.mode != kernel.ModeV2 {
		f.Severity, f.Summary = OK, fmt.Sprintf("cgroup %s host: memory.oom.group does not exist, the kernel kills single processes", n.mode)
		return f
	}
	type ctr struct {
		pod, id, cg string
		init        *kernel.Process
	}
	ctrs := map[string]*ctr{}
	for i := range n.procs {
		p := &n.procs[i]
		pod, cg, id, ok := n.containerOf(p)
		if !ok {
			continue
		}
		c := ctrs[cg]
		if c == nil {
			c = &ctr{pod: pod, id: id, cg: cg}
			ctrs[cg] = c
		}
		// The container's init is the process whose parent is outside it (the shim).
		if parent := n.byPid[p.PPid]; parent == nil || !within(parent.Cgroup, cg) {
			if c.init == nil || p.Pid < c.init.Pid {
				c.init = p
			}
		}
	}
	var bad, unknown []string
	keys := make([]string, 0, len(ctrs))
	for k := range ctrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	inits := 0
	for _, k := range keys {
		c := ctrs[k]
		if c.init == nil || !(initRE.MatchString(c.init.Comm) || (len(c.init.Cmdline) > 0 && initRE.MatchString(c.init.Cmdline[0]))) {
			continue
		}
		inits++
		on, by, err := kernel.EffectiveOOMGroup(n.root, n.mode, c.cg)
		if err != nil {
			unknown = append(unknown, fmt.Sprintf("%s: %v", n.ctrDesc(c.pod, c.id), err))
			continue
		}
		if on {
			bad = append(bad, fmt.Sprintf("%s: PID 1 is %s[%d], memory.oom.group = 1 on %s", n.ctrDesc(c.pod, c.id), c.init.Comm, c.init.Pid, by))
		}
	}
	f.Metric = &metric{Name: "oomguard_doctor_group_kill_containers", Value: float64(len(bad)), Help: groupKillHelp}
	switch {
	case len(bad) > 0:
		f.Severity = Critical
		f.Summary = fmt.Sprintf("%d containers run an init as PID 1 under memory.oom.group = 1: one runaway process kills the whole container, init included", len(bad))
		f.Details = bad
		f.Fix = "set memory.oom.group = 0 for them: an oomguard rule (the shipped config matches systemd and init) applied by oomguard-nri or oomguard-hook"
	case len(unknown) > 0:
		f.Severity, f.Summary, f.Details = Unknown, "could not read memory.oom.group of some init containers", unknown
	default:
		f.Severity, f.Summary = OK, fmt.Sprintf("%d containers with an init as PID 1, none killed whole", inits)
	}
	return f
}

// within reports whether cgroup path cg is dir or below it.
func within(cg, dir string) bool {
	return cg == dir || (strings.HasPrefix(cg, dir) && len(cg) > len(dir) && cg[len(dir)] == '/')
}
