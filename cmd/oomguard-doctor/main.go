// oomguard-doctor reads a node's /proc and /sys and reports every OOM risk
// the incidents found, worst first, each with its fix. It never writes to
// the node, but for remediate, which an operator opts into.
//
//	oomguard-doctor [--root DIR] [--json | --prometheus] [--tree] [--sample D] [--runtime-endpoint E] [--output FILE [--interval D]]
//	oomguard-doctor remediate [--root DIR] [--config FILE] [--undo] [--dry-run]
//
// Exit status: 0 ok, 1 warning, 2 critical, 4 usage or read errors.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/version"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/doctor"
	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/remediate"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if version.Asked(args) {
		fmt.Fprintln(stdout, version.String("oomguard-doctor"))
		return 0
	}
	if len(args) > 0 && args[0] == "remediate" {
		return cmdRemediate(args[1:], stdout, stderr)
	}
	fl := flag.NewFlagSet("oomguard-doctor", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", "/", "the node's filesystem root, or a captured tree")
	asJSON := fl.Bool("json", false, "findings as JSON")
	prom := fl.Bool("prometheus", false, "findings in the node_exporter textfile format")
	tree := fl.Bool("tree", false, "also print the process tree with OOM scores")
	sample := fl.Duration("sample", time.Second, "per-core CPU sample length; 0 skips it")
	cfgPath := fl.String("config", "", "configuration (default $OOMGUARD_CONFIG or "+config.DefaultPath+"; defaults when missing)")
	daemons := fl.String("daemons", "", "comma-separated node daemon names, replacing the configured list")
	endpoint := fl.String("runtime-endpoint", "", "CRI socket that names pods (unix:///PATH, below --root; default: the first of crictl's that exists; none: ask none)")
	output := fl.String("output", "", "write the report to this file (atomically) instead of stdout")
	interval := fl.Duration("interval", 0, "with --output: run again every interval, forever (a DaemonSet's periodic check)")
	if err := fl.Parse(args); err != nil {
		return 4
	}
	if fl.NArg() > 0 || (*asJSON && *prom) || (*interval > 0 && *output == "") {
		fmt.Fprintln(stderr, "oomguard-doctor: takes flags only; --json and --prometheus exclude each other; --interval needs --output")
		return 4
	}
	cfg, err := config.Find(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
		return 4
	}
	if *daemons != "" {
		cfg.Doctor.Daemons = strings.Split(*daemons, ",")
	}
	for {
		r, err := doctor.Examine(*root, cfg, *sample, *endpoint)
		if err != nil {
			fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
			return 4
		}
		var buf bytes.Buffer
		switch {
		case *asJSON:
			r.WriteJSON(&buf)
		case *prom:
			r.WritePrometheus(&buf)
		default:
			r.WriteText(&buf, *output == "" && isTerminal(stdout))
			if *tree {
				fmt.Fprintln(&buf)
				r.WriteTree(&buf)
			}
		}
		if *output == "" {
			stdout.Write(buf.Bytes())
		} else if err := atomicfile.Write(*output, buf.Bytes(), 0o644); err != nil {
			fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
			return 4
		}
		if *interval <= 0 {
			return r.ExitCode()
		}
		time.Sleep(*interval)
	}
}

// remediate applies the configuration's doctor.console_fix to the node (the
// DaemonSet's init container runs it), or undoes it.
func cmdRemediate(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("oomguard-doctor remediate", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", "/", "the node's filesystem root: its /proc/sys and /etc")
	cfgPath := fl.String("config", "", "configuration whose doctor.console_fix says what to set (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
	undo := fl.Bool("undo", false, "restore what remediate changed, and remove its drop-in")
	dryRun := fl.Bool("dry-run", false, "show what would change without changing anything")
	if err := fl.Parse(args); err != nil {
		return 4
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-doctor remediate: unexpected argument %q\n", fl.Arg(0))
		return 4
	}
	var err error
	if *undo {
		err = remediate.Undo(*root, *dryRun, stdout)
	} else {
		var cfg *config.Config
		if cfg, err = config.Find(*cfgPath); err == nil {
			err = remediate.Apply(*root, cfg.Doctor.ConsoleFix, *dryRun, stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-doctor remediate: %v\n", err)
		return 4
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
