// oomguard-doctor reads a node's /proc and /sys and reports every OOM risk
// the incidents found, worst first, each with its fix. It never writes to
// the node.
//
//	oomguard-doctor [--root DIR] [--json | --prometheus] [--tree] [--sample D] [--output FILE [--interval D]]
//
// Exit status: 0 ok, 1 warning, 2 critical, 4 usage or read errors.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/atomicfile"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("oomguard-doctor", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", "/", "the node's filesystem root, or a captured tree")
	asJSON := fl.Bool("json", false, "findings as JSON")
	prom := fl.Bool("prometheus", false, "findings in the node_exporter textfile format")
	tree := fl.Bool("tree", false, "also print the process tree with OOM scores")
	sample := fl.Duration("sample", time.Second, "per-core CPU sample length; 0 skips it")
	cfgPath := fl.String("config", "", "configuration (default $OOMGUARD_CONFIG or "+config.DefaultPath+"; defaults when missing)")
	daemons := fl.String("daemons", "", "comma-separated node daemon names, replacing the configured list")
	output := fl.String("output", "", "write the report to this file (atomically) instead of stdout")
	interval := fl.Duration("interval", 0, "with --output: run again every interval, forever (a DaemonSet's periodic check)")
	if err := fl.Parse(args); err != nil {
		return 4
	}
	if fl.NArg() > 0 || (*asJSON && *prom) || (*interval > 0 && *output == "") {
		fmt.Fprintln(stderr, "oomguard-doctor: takes flags only; --json and --prometheus exclude each other; --interval needs --output")
		return 4
	}
	cfg, err := config.Load(config.Path(*cfgPath))
	if err != nil {
		if *cfgPath != "" || !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
			return 4
		}
		cfg = config.Default()
	}
	if *daemons != "" {
		cfg.Doctor.Daemons = strings.Split(*daemons, ",")
	}
	for {
		var buf bytes.Buffer
		w := stdout
		if *output != "" {
			w = &buf
		}
		code := report(w, stderr, *root, cfg, *sample, *asJSON, *prom, *tree)
		if *output != "" {
			if err := atomicfile.Write(*output, buf.Bytes(), 0o644); err != nil {
				fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
				return 4
			}
		}
		if *interval <= 0 {
			return code
		}
		time.Sleep(*interval)
	}
}

// report examines the node once and writes the findings; it returns the exit status.
func report(stdout, stderr io.Writer, root string, cfg *config.Config, sample time.Duration, asJSON, prom, tree bool) int {
	n, err := loadNode(root, cfg, sample)
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
		return 4
	}
	findings := []Finding{n.checkRanking(), n.checkGroupKill(), n.checkConsole(), n.checkZombies(), n.checkNICCPU()}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Severity > findings[j].Severity })
	switch {
	case asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(map[string]any{"root": root, "findings": findings})
	case prom:
		writePrometheus(stdout, findings)
	default:
		writeText(stdout, root, findings, isTerminal(stdout))
		if tree {
			fmt.Fprintln(stdout)
			n.writeTree(stdout)
		}
	}
	switch worst := findings[0].Severity; worst {
	case Critical:
		return 2
	case Warning:
		return 1
	}
	return 0
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

var colours = map[Severity]string{Critical: "\x1b[1;31m", Warning: "\x1b[33m", Unknown: "\x1b[35m", OK: "\x1b[32m", Info: "\x1b[36m"}

func writeText(w io.Writer, root string, findings []Finding, colour bool) {
	fmt.Fprintf(w, "oomguard-doctor: %s\n\n", root)
	for _, f := range findings {
		sev := fmt.Sprintf("%-8s", strings.ToUpper(f.Severity.String()))
		if colour {
			sev = colours[f.Severity] + sev + "\x1b[0m"
		}
		fmt.Fprintf(w, "%s  %-13s  %s\n", sev, f.Check, f.Summary)
		for _, d := range f.Details {
			fmt.Fprintf(w, "%-8s  %-13s    - %s\n", "", "", d)
		}
		if f.Fix != "" {
			fmt.Fprintf(w, "%-8s  %-13s    fix: %s\n", "", "", f.Fix)
		}
	}
}

func writePrometheus(w io.Writer, findings []Finding) {
	fmt.Fprintln(w, "# HELP oomguard_doctor_severity Severity of each check: 0 ok, 1 info, 2 unknown, 3 warning, 4 critical.")
	fmt.Fprintln(w, "# TYPE oomguard_doctor_severity gauge")
	for _, f := range findings {
		fmt.Fprintf(w, "oomguard_doctor_severity{check=%q} %d\n", f.Check, f.Severity)
	}
	for _, f := range findings {
		if m := f.Metric; m != nil {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", m.Name, m.Help, m.Name, m.Name, m.Value)
		}
	}
}

// writeTree prints the process tree like the investigation's oom_info.py:
// pid, name, oom_score (adj), and the pod and container a process belongs to.
func (n *node) writeTree(w io.Writer) {
	children := map[int][]int{}
	for _, p := range n.procs {
		children[p.PPid] = append(children[p.PPid], p.Pid)
	}
	for _, c := range children {
		sort.Ints(c)
	}
	var walk func(pid int, indent string)
	walk = func(pid int, indent string) {
		p := n.byPid[pid]
		if p == nil || p.Kernel {
			return
		}
		where := ""
		if pod, _, ctr, ok := containerOf(p.Cgroup); ok {
			where = fmt.Sprintf("  [pod %s container %s]", pod, short(ctr))
		} else if n.isDaemon(p) {
			where = "  [node daemon]"
		}
		fmt.Fprintf(w, "%s[%d] %s: %d (%+d)%s\n", indent, p.Pid, p.Comm, p.OOMScore, p.OOMScoreAdj, where)
		for _, c := range children[pid] {
			walk(c, indent+"  ")
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
		walk(r, "")
	}
}
