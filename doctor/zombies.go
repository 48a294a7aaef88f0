package doctor

import (
	"fmt"
	"regexp"

	"github.com/oomguard/oomguard/internal/kernel"
)

var el7RE = regexp.MustCompile(`^3\.10\.0-.*\.el7`)

// checkZombies: dying memory cgroups, which slow every walk of the memcg tree.
func (n *node) checkZombies() Finding {
	f := Finding{Check: "zombie-memcgs"}
	dying, err := dyingMemcgs(n.root, n.mode)
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot count dying memory cgroups: "+err.Error()
		return f
	}
	f.Metric = &metric{Name: "oomguard_doctor_dying_memcgs", Value: float64(dying), Help: dyingMemcgsHelp}
	release, _ := kernel.ReadSysctl(n.root, "kernel.osrelease")
	warn, crit := n.cfg.Doctor.DyingMemcgsWarning, n.cfg.Doctor.DyingMemcgsCritical
	oldKernel := el7RE.MatchString(release)
	if oldKernel {
		warn, crit = min(warn, 100), min(crit, 1000)
	}
	f.Summary = fmt.Sprintf("%d dying memory cgroups", dying)
	switch {
	case dying >= crit:
		f.Severity = Critical
	case dying >= warn:
		f.Severity = Warning
	default:
		f.Severity = OK
		return f
	}
	f.Summary += " (a core can spend minutes in %sys walking them, starving NIC interrupts on it)"
	if oldKernel {
		f.Details = append(f.Details, "kernel "+release+" is known for cgroup rmdir lockups with many dying memory cgroups")
	}
	f.Fix = "find what creates and removes cgroups at a high rate (short-lived pods, CronJobs); drop_caches frees the ones page cache pins (echo 3 > /proc/sys/vm/drop_caches, temporarily); newer kernels reclaim them"
	return f
}
