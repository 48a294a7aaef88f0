package doctor

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

var nicRE = regexp.MustCompile(`(?i)(^ena|mlx5|mlx4|virtio\d+-(input|output)|-tx-?rx-|-txrx-|^eth\d|^ens\d|i40e|ixgbe|ice-|bnxt|gve|efa)`)

// checkNICCPU: a core that serves a NIC queue and is saturated by kernel
// work, hidden by a calm machine average.
func (n *node) checkNICCPU() Finding {
	f := Finding{Check: "nic-cpu"}
	irqs, err := readInterrupts(n.root)
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot read /proc/interrupts: "+err.Error()
		return f
	}
	nicCPUs := map[int][]string{}
	for _, in := range irqs {
		if !nicRE.MatchString(in.Name) {
			continue
		}
		cpus, err := irqAffinity(n.root, in.IRQ, len(in.Counts))
		if err != nil {
			// Without the affinity files, the CPUs that took the interrupts.
			for c, cnt := range in.Counts {
				if cnt > 0 {
					cpus = append(cpus, c)
				}
			}
		}
		for _, c := range cpus {
			nicCPUs[c] = append(nicCPUs[c], in.Name)
		}
	}
	if len(nicCPUs) == 0 {
		f.Severity, f.Summary = Info, "no NIC queue interrupts found"
		return f
	}
	before, after, err := n.cpuSample()
	if err != nil {
		f.Severity, f.Summary = Unknown, fmt.Sprintf("%d CPUs serve NIC queues; per-core load not sampled: %v", len(nicCPUs), err)
		return f
	}
	prev := map[int]cpuTimes{}
	for _, c := range before {
		prev[c.CPU] = c
	}
	var avg float64
	var hot []string
	maxKernel := 0.0
	for _, c := range after {
		p, ok := prev[c.CPU]
		total := float64(c.Total() - p.Total())
		if !ok || total <= 0 {
			continue
		}
		if c.CPU < 0 {
			avg = 100 * (total - float64(c.Idle+c.IOWait-p.Idle-p.IOWait)) / total
			continue
		}
		kern := 100 * float64(c.System+c.IRQ+c.SoftIRQ-p.System-p.IRQ-p.SoftIRQ) / total
		if names, nic := nicCPUs[c.CPU]; nic {
			maxKernel = max(maxKernel, kern)
			if kern >= 90 {
				hot = append(hot, fmt.Sprintf("cpu%d %.0f%% sys+irq+softirq, serves %s", c.CPU, kern, strings.Join(uniq(names), " ")))
			}
		}
	}
	f.Metric = &metric{Name: "oomguard_doctor_nic_cpu_kernel_percent", Value: maxKernel, Help: nicCPUHelp}
	if len(hot) > 0 && avg < 50 {
		f.Severity = Warning
		f.Summary = fmt.Sprintf("%d CPUs serving NIC queues are saturated by kernel work while the machine's CPUs are %.0f%% busy on average: the NIC driver starves and may reset", len(hot), avg)
		f.Details = hot
		f.Fix = "find the %sys consumer on those cores (perf top -C N; zombie memory cgroups are a known one), or move the NIC IRQs (/proc/irq/N/smp_affinity_list) off them"
		return f
	}
	f.Severity, f.Summary = OK, fmt.Sprintf("%d CPUs serve NIC queues; the busiest spends %.0f%% of its time in kernel work; the machine's CPUs are %.0f%% busy on average (user and kernel)", len(nicCPUs), maxKernel, avg)
	return f
}

// cpuSample reads /proc/stat twice, sample apart; a captured tree may hold
// the second reading as proc/stat.next.
func (n *node) cpuSample() ([]cpuTimes, []cpuTimes, error) {
	before, err := readCPUTimes(n.root, "proc/stat")
	if err != nil {
		return nil, nil, err
	}
	if next, err := readCPUTimes(n.root, "proc/stat.next"); err == nil {
		return before, next, nil
	}
	if n.sample <= 0 {
		return nil, nil, errors.New("sampling disabled (--sample 0)")
	}
	time.Sleep(n.sample)
	after, err := readCPUTimes(n.root, "proc/stat")
	return before, after, err
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
