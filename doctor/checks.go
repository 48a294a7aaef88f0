package main

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
)

// Severity orders findings; the worst one sets the exit status.
type Severity int

const (
	OK Severity = iota
	Info
	Unknown
	Warning
	Critical
)

func (s Severity) String() string {
	return [...]string{"ok", "info", "unknown", "warning", "critical"}[s]
}

// MarshalText implements encoding.TextMarshaler.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Finding is one thing the doctor found.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	Summary  string   `json:"summary"`
	Details  []string `json:"details,omitempty"`
	Fix      string   `json:"fix,omitempty"`
	// Metric is the check's number for --prometheus, when it has one.
	Metric *metric `json:"metric,omitempty"`
}

type metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Help  string  `json:"-"`
}

// node is one snapshot of a node's processes, read once for every check.
type node struct {
	root   string
	mode   kernel.Mode
	procs  []kernel.Process
	byPid  map[int]*kernel.Process
	cfg    *config.Config
	sample time.Duration
}

func loadNode(root string, cfg *config.Config, sample time.Duration) (*node, error) {
	n := &node{root: root, mode: kernel.DetectMode(root), cfg: cfg, sample: sample, byPid: map[int]*kernel.Process{}}
	pids, err := kernel.ListPids(root)
	if err != nil {
		return nil, fmt.Errorf("list processes in %s: %w", path.Join(root, "proc"), err)
	}
	// Read in parallel: a node has tens of thousands of processes.
	procs := make([]kernel.Process, len(pids))
	ok := make([]bool, len(pids))
	var wg sync.WaitGroup
	const workers = 4
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kernel.NewProcReader(root, n.mode)
			for i := w; i < len(pids); i += workers {
				p, err := r.Read(pids[i])
				procs[i], ok[i] = p, err == nil // a process that exited meanwhile is skipped
			}
		}()
	}
	wg.Wait()
	for i := range procs {
		if ok[i] {
			n.procs = append(n.procs, procs[i])
		}
	}
	for i := range n.procs {
		n.byPid[n.procs[i].Pid] = &n.procs[i]
	}
	return n, nil
}

// Container identity from a cgroup path, as kubelet and the runtimes lay it out.
var (
	podRE       = regexp.MustCompile(`(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-z]+)(\.slice)?$`)
	ctrPrefixes = []string{"cri-containerd-", "crio-conmon-", "crio-", "docker-", "libpod-", "containerd-"}
)

// containerOf splits a cgroup path into its pod and container cgroups:
// "/kubepods/burstable/pod1/abc/init.scope" → pod "1", container cgroup
// "/kubepods/burstable/pod1/abc", id "abc".
func containerOf(cg string) (pod, ctrCgroup, id string, ok bool) {
	if !strings.Contains(cg, "kubepods") {
		return "", "", "", false
	}
	parts := strings.Split(strings.Trim(cg, "/"), "/")
	for i, p := range parts {
		m := podRE.FindStringSubmatch(p)
		if m == nil || i+1 >= len(parts) {
			continue
		}
		pod = strings.ReplaceAll(m[1], "_", "-")
		id = parts[i+1]
		for _, pre := range ctrPrefixes {
			id = strings.TrimPrefix(id, pre)
		}
		id = strings.TrimSuffix(id, ".scope")
		return pod, "/" + strings.Join(parts[:i+2], "/"), id, true
	}
	return "", "", "", false
}

func short(id string) string { return id[:min(len(id), 12)] }

func (n *node) name(p *kernel.Process) string {
	if len(p.Cmdline) > 0 {
		return path.Base(p.Cmdline[0])
	}
	return p.Comm
}

func (n *node) isDaemon(p *kernel.Process) bool {
	if _, _, _, inPod := containerOf(p.Cgroup); inPod {
		return false
	}
	for _, d := range n.cfg.Doctor.Daemons {
		if p.Comm == kernel.TaskComm(d) || n.name(p) == d {
			return true
		}
	}
	return false
}

func (n *node) killable(p *kernel.Process) bool {
	return !p.Kernel && p.OOMScoreAdj > kernel.OOMScoreAdjMin && p.Pid != 1
}

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
		if _, _, _, inPod := containerOf(p.Cgroup); inPod {
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
	pod, _, ctr, _ := containerOf(top.Cgroup)
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
		pod, cg, id, ok := containerOf(p.Cgroup)
		if !ok {
			continue
		}
		c := ctrs[cg]
		if c == nil {
			c = &ctr{pod: pod, id: id, cg: cg}
			ctrs[cg] = c
		}
		// The container's init is the process whose parent is outside it (the shim).
		if parent := n.byPid[p.PPid]; parent == nil || !strings.HasPrefix(parent.Cgroup+"/", cg+"/") {
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
			unknown = append(unknown, fmt.Sprintf("pod %s container %s: %v", c.pod, short(c.id), err))
			continue
		}
		if on {
			bad = append(bad, fmt.Sprintf("pod %s container %s: PID 1 is %s[%d], memory.oom.group = 1 on %s", c.pod, short(c.id), c.init.Comm, c.init.Pid, by))
		}
	}
	f.Metric = &metric{Name: "oomguard_doctor_group_kill_containers", Value: float64(len(bad)), Help: "Containers with an init as PID 1 that an OOM kills whole."}
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

// Console output speed: the kernel prints the OOM task dump with interrupts
// off; about 145 characters a task, 10 bits a character on a serial line.
const charsPerTask = 145

var serialRE = regexp.MustCompile(`^(ttyS|ttyAMA|ttymxc|ttyPS|ttySAC|ttyMSM|ttyUSB)\d+$`)

// checkConsole: how long one OOM kill holds the console.
func (n *node) checkConsole() Finding {
	f := Finding{Check: "console"}
	dump, err := kernel.ReadSysctl(n.root, "vm.oom_dump_tasks")
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot read vm.oom_dump_tasks: "+err.Error()
		return f
	}
	if dump == "0" {
		f.Severity, f.Summary = OK, "vm.oom_dump_tasks = 0: OOM kills print no task list"
		return f
	}
	consoles, err := kernel.Consoles(n.root)
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot read /proc/consoles: "+err.Error()
		return f
	}
	params, _ := kernel.CmdlineParams(n.root)
	var serial *kernel.Console
	for i := range consoles {
		if consoles[i].Enabled && serialRE.MatchString(consoles[i].Name) {
			serial = &consoles[i]
			break
		}
	}
	if serial == nil {
		f.Severity, f.Summary = OK, "no serial console: the task dump goes to fast consoles only"
		return f
	}
	baud := 9600 // the kernel's default for console=ttySn without options
	for _, kv := range params {
		if kv[0] != "console" {
			continue
		}
		dev, opts, _ := strings.Cut(kv[1], ",")
		if dev != serial.Name {
			continue
		}
		digits := opts[:len(opts)-len(strings.TrimLeft(opts, "0123456789"))] // "115200n8" → "115200"
		if b, err := strconv.Atoi(digits); err == nil && b > 0 {
			baud = b
		}
	}
	level := 7
	if pk, err := kernel.ReadSysctl(n.root, "kernel.printk"); err == nil {
		if fs := strings.Fields(pk); len(fs) > 0 {
			level, _ = strconv.Atoi(fs[0])
		}
	}
	tasks := 0
	for _, p := range n.procs {
		if !p.Kernel {
			tasks++
		}
	}
	secs := float64(tasks*charsPerTask) / (float64(baud) / 10)
	f.Metric = &metric{Name: "oomguard_doctor_console_dump_seconds", Value: secs, Help: "Seconds one OOM task dump holds the serial console."}
	detail := fmt.Sprintf("%d tasks × %d characters on %s at %d baud (console_loglevel %d)", tasks, charsPerTask, serial.Name, baud, level)
	if level <= 6 {
		f.Metric.Value = 0
		f.Severity, f.Summary = OK, fmt.Sprintf("console_loglevel %d keeps the task dump (KERN_INFO) off %s", level, serial.Name)
		return f
	}
	f.Details = []string{detail}
	switch {
	case secs > 5:
		f.Severity = Critical
		f.Summary = fmt.Sprintf("one OOM kill holds %s for %.0f s with interrupts off: past the ENA driver's 5 s Tx threshold, the NIC resets and the node goes NotReady", serial.Name, secs)
	case secs > 1:
		f.Severity = Warning
		f.Summary = fmt.Sprintf("one OOM kill holds %s for %.1f s with interrupts off", serial.Name, secs)
	default:
		f.Severity = OK
		f.Summary = fmt.Sprintf("one OOM task dump takes %.2f s on %s", secs, serial.Name)
		return f
	}
	f.Fix = "sysctl -w vm.oom_dump_tasks=0 (persist in /etc/sysctl.d/), or keep KERN_INFO off the console (sysctl -w kernel.printk=\"4 4 1 7\"), or boot with a faster or no serial console"
	return f
}

var el7RE = regexp.MustCompile(`^3\.10\.0-.*\.el7`)

// checkZombies: dying memory cgroups, which slow every walk of the memcg tree.
func (n *node) checkZombies() Finding {
	f := Finding{Check: "zombie-memcgs"}
	dying, err := kernel.DyingMemcgs(n.root, n.mode)
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot count dying memory cgroups: "+err.Error()
		return f
	}
	f.Metric = &metric{Name: "oomguard_doctor_dying_memcgs", Value: float64(dying), Help: "Memory cgroups removed but still held by the kernel."}
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

var nicRE = regexp.MustCompile(`(?i)(^ena|mlx5|mlx4|virtio\d+-(input|output)|-tx-?rx-|-txrx-|^eth\d|^ens\d|i40e|ixgbe|ice-|bnxt|gve|efa)`)

// checkNICCPU: a core that serves a NIC queue and is saturated by kernel
// work, hidden by a calm machine average.
func (n *node) checkNICCPU() Finding {
	f := Finding{Check: "nic-cpu"}
	irqs, err := kernel.Interrupts(n.root)
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot read /proc/interrupts: "+err.Error()
		return f
	}
	nicCPUs := map[int][]string{}
	for _, in := range irqs {
		if !nicRE.MatchString(in.Name) {
			continue
		}
		cpus, err := kernel.IRQAffinity(n.root, in.IRQ)
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
	prev := map[int]kernel.CPUTimes{}
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
	f.Metric = &metric{Name: "oomguard_doctor_nic_cpu_kernel_percent", Value: maxKernel, Help: "Highest sys+irq+softirq share of a CPU serving a NIC queue."}
	if len(hot) > 0 && avg < 50 {
		f.Severity = Warning
		f.Summary = fmt.Sprintf("%d CPUs serving NIC queues are saturated by kernel work while the machine average is %.0f%%: the NIC driver starves and may reset", len(hot), avg)
		f.Details = hot
		f.Fix = "find the %sys consumer on those cores (perf top -C N; zombie memory cgroups are a known one), or move the NIC IRQs (/proc/irq/N/smp_affinity_list) off them"
		return f
	}
	f.Severity, f.Summary = OK, fmt.Sprintf("%d CPUs serve NIC queues; the busiest spends %.0f%% in kernel work (machine average %.0f%%)", len(nicCPUs), maxKernel, avg)
	return f
}

// cpuSample reads /proc/stat twice, sample apart; a captured tree may hold
// the second reading as proc/stat.next.
func (n *node) cpuSample() ([]kernel.CPUTimes, []kernel.CPUTimes, error) {
	before, err := kernel.ReadCPUTimes(n.root, "proc/stat")
	if err != nil {
		return nil, nil, err
	}
	if next, err := kernel.ReadCPUTimes(n.root, "proc/stat.next"); err == nil {
		return before, next, nil
	}
	if n.sample <= 0 {
		return nil, nil, errors.New("sampling disabled (--sample 0)")
	}
	time.Sleep(n.sample)
	after, err := kernel.ReadCPUTimes(n.root, "proc/stat")
	return before, after, err
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
