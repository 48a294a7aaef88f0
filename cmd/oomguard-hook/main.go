// oomguard-hook is an OCI runtime hook (createRuntime, or prestart on old
// runtimes) that sets a container's oom_score_adj and memory.oom.group from
// the oomguard policy before the container's own process runs.
//
//	oomguard-hook [--config FILE] [--strict]        run as a hook: OCI state on stdin
//	oomguard-hook install [--hooks-dir DIR] …       write the hooks.d JSON where the runtimes read
//	oomguard-hook uninstall                         remove what install wrote
//	oomguard-hook print-config …                    print the hooks.d JSON
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/oomguard/oomguard/internal/version"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/hook"
	"github.com/oomguard/oomguard/internal/install"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `oomguard-hook: OCI runtime hook that sets oom_score_adj and memory.oom.group
from the oomguard policy when a container is created.

Usage:
  oomguard-hook [--config FILE] [--strict] [--log-file DEST] [--root DIR]
      Run as a createRuntime (or prestart) hook: reads the OCI state on stdin.
  oomguard-hook install [--root DIR] [--hooks-dir DIR] [--hook-path PATH] [--config FILE] [--stage STAGE] [--dry-run] [--copy]
      Write oomguard.json into every hooks.d directory CRI-O and podman read
      (their hooks_dir settings, else their default), or --hooks-dir. Idempotent.
      --copy (from a container, with --root) also puts this binary and the
      configuration on the node.
  oomguard-hook uninstall [--root DIR] [--dry-run]
      Remove what install wrote, unless it changed since.
  oomguard-hook print-config [same flags as install]
      Print that JSON instead of writing it.
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if version.Asked(args) {
		fmt.Fprintln(stdout, version.String("oomguard-hook"))
		return 0
	}
	if len(args) > 0 {
		switch args[0] {
		case "install", "print-config", "uninstall":
			return cmdInstall(args[0], args[1:], stdout, stderr)
		case "help", "-h", "--help":
			fmt.Fprint(stdout, usage)
			return 0
		}
	}
	fs := flag.NewFlagSet("oomguard-hook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var o hook.Options
	fs.StringVar(&o.ConfigPath, "config", "", "configuration file (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
	fs.BoolVar(&o.Strict, "strict", false, "fail closed: exit non-zero on any error (also strict = true in the config)")
	fs.StringVar(&o.Root, "root", "/", "host filesystem root holding /proc and /sys")
	fs.StringVar(&o.LogFile, "log-file", "", "log destination overriding the config's log.file: a path, syslog or stderr")
	fs.DurationVar(&o.Deadline, "deadline", hook.DefaultDeadline, "give up on the container (leave it as it is) after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-hook: unexpected argument %q; run 'oomguard-hook help'\n", fs.Arg(0))
		return 2
	}
	return runHook(o, stdin, stderr)
}

// runHook runs the hook until it is done or its deadline passes, whatever it
// waits on: then the container is left as it is.
func runHook(o hook.Options, stdin io.Reader, stderr io.Writer) int {
	if o.Deadline <= 0 {
		o.Deadline = hook.DefaultDeadline
	}
	h := hook.New(o)
	done := make(chan int, 1)
	go func() { done <- h.Run(stdin, stderr) }()
	t := time.NewTimer(o.Deadline)
	defer t.Stop()
	select {
	case code := <-done:
		return code
	case <-t.C:
		fmt.Fprintf(stderr, "oomguard-hook: the %s deadline passed (something it reads did not answer); container left as it is\n", o.Deadline)
		return h.FailCode()
	}
}

func cmdInstall(name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("oomguard-hook "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o install.HookOptions
	fs.StringVar(&o.Root, "root", "/", "the node's filesystem root")
	fs.BoolVar(&o.DryRun, "dry-run", false, "show what would change without writing")
	if name != "uninstall" {
		fs.StringVar(&o.Dir, "hooks-dir", "", "the one hooks.d directory to write "+install.HookFileName+" into (default: every one the node's runtimes read)")
		fs.StringVar(&o.HookPath, "hook-path", "", "absolute path of the oomguard-hook binary the runtime runs (default: this binary)")
		fs.StringVar(&o.ConfigPath, "config", "", "configuration file the hook reads (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
		fs.StringVar(&o.Stage, "stage", "createRuntime", "OCI hook stage: createRuntime, or prestart for runtimes without it")
		fs.BoolVar(&o.Copy, "copy", false, "copy this binary to --hook-path and --config to the same path under --root (the DaemonSet's init container)")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-hook %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	o.ConfigPath = config.Path(o.ConfigPath)
	var err error
	switch name {
	case "print-config":
		var doc []byte
		if doc, err = install.HookDocument(o); err == nil {
			stdout.Write(doc)
		}
	case "uninstall":
		err = install.UninstallHook(o.Root, o.DryRun, stdout)
	default:
		err = install.Hook(o, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-hook %s: %v\n", name, err)
		if _, bad := err.(*install.OptionError); bad {
			return 2
		}
		return 1
	}
	return 0
}
