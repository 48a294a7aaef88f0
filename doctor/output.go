package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/oomguard/oomguard/internal/escape"
)

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

var colours = map[Severity]string{Critical: "\x1b[1;31m", Warning: "\x1b[33m", Unknown: "\x1b[35m", OK: "\x1b[32m", Info: "\x1b[36m"}

// WriteText writes the findings for a terminal, in colour if asked.
func (r *Report) WriteText(w io.Writer, colour bool) {
	// Findings quote names and files a pod or a captured tree chose.
	fmt.Fprintf(w, "oomguard-doctor: %s\n\n", escape.Terminal(r.Root))
	for _, f := range r.Findings {
		sev := fmt.Sprintf("%-8s", strings.ToUpper(f.Severity.String()))
		if colour {
			sev = colours[f.Severity] + sev + "\x1b[0m"
		}
		fmt.Fprintf(w, "%s  %-13s  %s\n", sev, f.Check, escape.Terminal(f.Summary))
		for _, d := range f.Details {
			fmt.Fprintf(w, "%-8s  %-13s    - %s\n", "", "", escape.Terminal(d))
		}
		if f.Fix != "" {
			fmt.Fprintf(w, "%-8s  %-13s    fix: %s\n", "", "", f.Fix)
		}
	}
}

// WritePrometheus writes the findings in the node_exporter textfile format.
func (r *Report) WritePrometheus(w io.Writer) {
	findings := r.Findings
	fmt.Fprintln(w, "# HELP oomguard_doctor_severity Severity of each check: 0 ok, 1 info, 2 unknown, 3 warning, 4 critical.")
	fmt.Fprintln(w, "# TYPE oomguard_doctor_severity gauge")
	for _, f := range findings {
		fmt.Fprintf(w, "oomguard_doctor_severity{check=%q} %d\n", f.Check, f.Severity)
	}
	// Every gauge on every run (alerts need the series): NaN when a check
	// could not measure it this time.
	have := map[string]*metric{}
	for _, f := range findings {
		if f.Metric != nil {
			have[f.Metric.Name] = f.Metric
		}
	}
	for _, g := range gauges {
		v := math.NaN()
		if m := have[g.Name]; m != nil {
			v = m.Value
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", g.Name, g.Help, g.Name, g.Name, v)
	}
	fmt.Fprintln(w, "# HELP oomguard_doctor_last_run_timestamp_seconds When this report was made (a stale textfile means the doctor stopped).")
	fmt.Fprintln(w, "# TYPE oomguard_doctor_last_run_timestamp_seconds gauge")
	fmt.Fprintf(w, "oomguard_doctor_last_run_timestamp_seconds %d\n", r.Time.Unix())
	fmt.Fprintln(w, "# HELP oomguard_doctor_info 1, labelled with the doctor's version and the report's schema version.")
	fmt.Fprintln(w, "# TYPE oomguard_doctor_info gauge")
	fmt.Fprintf(w, "oomguard_doctor_info{version=%q,schema_version=\"%d\"} 1\n", r.Version, r.SchemaVersion)
}

const (
	daemonsOutrankingHelp = "Node daemons a global OOM would kill before the runaway of the worst container that can fill the node."
	groupKillHelp         = "Containers with an init as PID 1 that an OOM kills whole."
	consoleDumpHelp       = "Seconds one OOM task dump holds the serial console."
	dyingMemcgsHelp       = "Memory cgroups removed but still held by the kernel."
	nicCPUHelp            = "Highest sys+irq+softirq share of a CPU serving a NIC queue."
)

// gauges are every check's measure, in the order written.
var gauges = []metric{
	{Name: "oomguard_doctor_daemons_outranking_pods", Help: daemonsOutrankingHelp},
	{Name: "oomguard_doctor_group_kill_containers", Help: groupKillHelp},
	{Name: "oomguard_doctor_console_dump_seconds", Help: consoleDumpHelp},
	{Name: "oomguard_doctor_dying_memcgs", Help: dyingMemcgsHelp},
	{Name: "oomguard_doctor_nic_cpu_kernel_percent", Help: nicCPUHelp},
}

// WriteTree prints the process tree like the investigation's oom_info.py:
// pid, name, oom_score (adj), and the pod and container a process belongs to.
func (r *Report) WriteTree(w io.Writer) {
	n := r.node
	children := map[int][]int{}
	for _, p := range n.procs {
		children[p.PPid] = append(children[p.PPid], p.Pid)
	}
	for _, c := range children {
		sort.Ints(c)
	}
	var line []byte
	var walk func(pid int, depth int)
	walk = func(pid int, depth int) {
		p := n.byPid[pid]
		if p == nil || p.Kernel {
			return
		}
		line = append(line[:0], strings.Repeat("  ", depth)...)
		line = append(strconv.AppendInt(append(line, '['), int64(p.Pid), 10), "] "...)
		line = append(append(line, escape.Terminal(p.Comm)...), ": "...)
		line = append(strconv.AppendInt(line, int64(p.OOMScore), 10), " ("...)
		if p.OOMScoreAdj >= 0 {
			line = append(line, '+')
		}
		line = append(strconv.AppendInt(line, int64(p.OOMScoreAdj), 10), ')')
		if pod, _, ctr, ok := n.containerOf(p); ok {
			if name, ok := n.names[ctr]; ok {
				line = append(append(append(line, "  ["...), escape.Terminal(name.String())...), ']')
			}
			line = append(append(append(append(line, "  [pod "...), pod...), " container "...), short(ctr)...)
			line = append(line, ']')
		} else if n.isDaemon(p) {
			line = append(line, "  [node daemon]"...)
		}
		w.Write(append(line, '\n'))
		for _, c := range children[pid] {
			walk(c, depth+1)
		}
	}
	roots := []int{}
	for _, p := range n.procs {
		if n.byPid[p.PPid] == nil {
			roots = append(roots, p.Pid)
		}
	}
	sort.Ints(roots)
	for _, r := range roots {
		walk(r, 0)
	}
}
