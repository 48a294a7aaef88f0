// oomguard-doctor reads a node's /proc and /sys and reports every OOM risk
// the incidents found, worst first, each with its fix. It never writes to
// the node, but for remediate, which an operator opts into.
//
//	oomguard-doctor [--root DIR] [--json | --prometheus] [--tree] [--sample D] [--runtime-endpoint E] [--output FILE [--interval D]]
//	oomguard-doctor remediate [--root DIR] [--config FILE] [--undo] [--dry-run]
//
// Exit status: 0 ok, 1 warning, 2 critical (or a usage error, as in every
// oomguard command), 4 read errors.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/doctor"
	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/remediate"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Main(context.Background(), program(), args, cli.IO{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr})
}

// exitRead is the doctor's exit status when it cannot read what it needs.
const exitRead = 4

type flags struct {
	root, cfgPath, daemons, endpoint, output string
	asJSON, prom, tree                       bool
	sample, interval                         time.Duration
}

func program() *cli.Command {
	var f flags
	prog := &cli.Command{
		Name:    "oomguard-doctor",
		Summary: "reports a node's OOM risks, worst first, each with its fix.",
		Help: "Examine the node (or a captured tree). Exit status: 0 ok, 1 warning,\n" +
			"2 critical (or a usage error), 4 read errors.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&f.root, "root", "/", "the node's filesystem root, or a captured tree (`DIR`)")
			fs.BoolVar(&f.asJSON, "json", false, "findings as JSON")
			fs.BoolVar(&f.prom, "prometheus", false, "findings in the node_exporter textfile format")
			fs.BoolVar(&f.tree, "tree", false, "also print the process tree with OOM scores")
			fs.DurationVar(&f.sample, "sample", time.Second, "per-core CPU sample length; 0 skips it")
			fs.StringVar(&f.cfgPath, "config", "", "configuration `FILE` (default $OOMGUARD_CONFIG or "+config.DefaultPath+"; defaults when missing)")
			fs.StringVar(&f.daemons, "daemons", "", "comma-separated node daemon `NAMES`, replacing the configured list")
			fs.StringVar(&f.endpoint, "runtime-endpoint", "", "CRI socket that names pods (unix:///PATH, below --root; default: the first of crictl's that exists; none: ask none)")
			fs.StringVar(&f.output, "output", "", "write the report to this `FILE` (atomically) instead of stdout")
			fs.DurationVar(&f.interval, "interval", 0, "with --output: run again every interval, forever (a DaemonSet's periodic check)")
		},
		Commands: []*cli.Command{remediateCommand()},
	}
	prog.Run = func(_ context.Context, _ []string, s cli.IO) int {
		if f.asJSON && f.prom {
			return cli.Usagef(s.Stderr, prog, "--json and --prometheus exclude each other")
		}
		if f.interval > 0 && f.output == "" {
			return cli.Usagef(s.Stderr, prog, "--interval needs --output")
		}
		return examine(f, s.Stdout, s.Stderr)
	}
	return prog
}

func examine(f flags, stdout, stderr io.Writer) int {
	load := func() (*config.Config, error) {
		cfg, err := config.Find(f.cfgPath)
		if err == nil && f.daemons != "" {
			cfg.Doctor.Daemons = strings.Split(f.daemons, ",")
		}
		return cfg, err
	}
	cfg, err := load()
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
		return exitRead
	}
	for {
		r, err := doctor.Examine(f.root, cfg, f.sample, f.endpoint)
		if err != nil {
			fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
			return exitRead
		}
		var buf bytes.Buffer
		switch {
		case f.asJSON:
			r.WriteJSON(&buf)
		case f.prom:
			r.WritePrometheus(&buf)
		default:
			r.WriteText(&buf, f.output == "" && cli.IsTerminal(stdout))
			if f.tree {
				fmt.Fprintln(&buf)
				r.WriteTree(&buf)
			}
		}
		if f.output == "" {
			stdout.Write(buf.Bytes())
		} else if err := atomicfile.Write(f.output, buf.Bytes(), 0o644); err != nil {
			fmt.Fprintf(stderr, "oomguard-doctor: %v\n", err)
			return exitRead
		}
		if f.interval <= 0 {
			return r.ExitCode()
		}
		time.Sleep(f.interval)
		// A changed configuration (a ConfigMap's update) is taken on the next
		// run; one that does not validate leaves the last good one.
		if next, err := load(); err != nil {
			fmt.Fprintf(stderr, "oomguard-doctor: keeping the configuration in force (%s): %v\n", cfg.Hash, err)
		} else {
			cfg = next
		}
	}
}

// remediateCommand applies the configuration's doctor.console_fix to the
// node (the DaemonSet's init container runs it), or undoes it.
func remediateCommand() *cli.Command {
	var root, cfgPath string
	var undo, dryRun bool
	return &cli.Command{
		Name: "remediate",
		Help: "Set what doctor.console_fix lists (vm.oom_dump_tasks, the console log level)\n" +
			"now and in a sysctl.d drop-in, recording what they were; --undo restores them.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&root, "root", "/", "the node's filesystem root: its /proc/sys and /etc (`DIR`)")
			fs.StringVar(&cfgPath, "config", "", "configuration `FILE` whose doctor.console_fix says what to set (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
			fs.BoolVar(&undo, "undo", false, "restore what remediate changed, and remove its drop-in")
			fs.BoolVar(&dryRun, "dry-run", false, "show what would change without changing anything")
		},
		Run: func(_ context.Context, _ []string, s cli.IO) int {
			var err error
			if undo {
				err = remediate.Undo(root, dryRun, s.Stdout)
			} else {
				var cfg *config.Config
				if cfg, err = config.Find(cfgPath); err == nil {
					err = remediate.Apply(root, cfg.Doctor.ConsoleFix, dryRun, s.Stdout)
				}
			}
			if err != nil {
				fmt.Fprintf(s.Stderr, "oomguard-doctor remediate: %v\n", err)
				return exitRead
			}
			return 0
		},
	}
}
