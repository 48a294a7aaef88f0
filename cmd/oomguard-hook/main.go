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
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/hook"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/configcheck"
	"github.com/oomguard/oomguard/internal/install"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Main(context.Background(), program(), args, cli.IO{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

func program() *cli.Command {
	var o hook.Options
	var io install.HookOptions
	installFlags := func(withTarget bool) func(*flag.FlagSet) {
		return func(fs *flag.FlagSet) {
			fs.StringVar(&io.Root, "root", "/", "the node's filesystem root `DIR`")
			fs.BoolVar(&io.DryRun, "dry-run", false, "show what would change without writing")
			if !withTarget {
				return
			}
			fs.StringVar(&io.Dir, "hooks-dir", "", "the one hooks.d `DIR` to write "+install.HookFileName+" into (default: every one the node's runtimes read)")
			fs.StringVar(&io.HookPath, "hook-path", "", "absolute `PATH` of the oomguard-hook binary the runtime runs (default: this binary)")
			fs.StringVar(&io.ConfigPath, "config", "", "configuration `FILE` the hook reads (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
			fs.StringVar(&io.Stage, "stage", "createRuntime", "OCI hook `STAGE`: createRuntime, or prestart for runtimes without it")
			fs.BoolVar(&io.Copy, "copy", false, "copy this binary to --hook-path and --config to the same path under --root (the DaemonSet's init container)")
		}
	}
	installCmd := func(name, help string) *cli.Command {
		return &cli.Command{Name: name, Help: help, Flags: installFlags(name != "uninstall"),
			Run: func(_ context.Context, _ []string, s cli.IO) int { return cmdInstall(name, io, s.Stdout, s.Stderr) }}
	}
	return &cli.Command{
		Name:    "oomguard-hook",
		Summary: "OCI runtime hook that sets oom_score_adj and memory.oom.group\nfrom the oomguard policy when a container is created.",
		Help:    "Run as a createRuntime (or prestart) hook: reads the OCI state on stdin.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.ConfigPath, "config", "", "configuration `FILE` (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
			fs.BoolVar(&o.Strict, "strict", false, "fail closed: exit non-zero on any error (also strict = true in the config)")
			fs.StringVar(&o.Root, "root", "/", "host filesystem `DIR` holding /proc and /sys")
			fs.StringVar(&o.LogFile, "log-file", "", "log `DEST` overriding the config's log.file: a path, syslog or stderr")
			fs.StringVar(&o.CacheDir, "cache-dir", hook.DefaultCacheDir, "`DIR` keeping the parsed configuration between runs, the owner's alone; \"\" parses it every run")
			fs.DurationVar(&o.Deadline, "deadline", hook.DefaultDeadline, "give up on the container (leave it as it is) after this long")
		},
		Run: func(_ context.Context, _ []string, s cli.IO) int { return runHook(o, s.Stdin, s.Stderr) },
		Commands: []*cli.Command{
			installCmd("install", "Write "+install.HookFileName+" into every hooks.d directory CRI-O and podman read\n(their hooks_dir settings, else their default), or --hooks-dir. Idempotent.\n--copy (from a container, with --root) also puts this binary and the\nconfiguration on the node."),
			installCmd("uninstall", "Remove what install wrote, unless it changed since."),
			installCmd("print-config", "Print that JSON instead of writing it."),
			configcheck.Command(),
		},
	}
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

func cmdInstall(name string, o install.HookOptions, stdout, stderr io.Writer) int {
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
			return cli.ExitUsage
		}
		return 1
	}
	return 0
}
