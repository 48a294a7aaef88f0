// oomguard-hook is an OCI runtime hook (createRuntime, or prestart on old
// runtimes) that sets a container's oom_score_adj and memory.oom.group from
// the oomguard policy before the container's own process runs.
//
//	oomguard-hook [--config FILE] [--strict]        run as a hook: OCI state on stdin
//	oomguard-hook install [--hooks-dir DIR] …       write the hooks.d JSON
//	oomguard-hook print-config …                    print the hooks.d JSON
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "install":
			return cmdInstall(args[1:], stdout, stderr, false)
		case "print-config":
			return cmdInstall(args[1:], stdout, stderr, true)
		case "help", "-h", "--help":
			usage(stdout)
			return 0
		}
	}
	fs := flag.NewFlagSet("oomguard-hook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr) }
	var o hookOptions
	fs.StringVar(&o.configPath, "config", "", "configuration file (default $OOMGUARD_CONFIG or /etc/oomguard/config.toml)")
	fs.BoolVar(&o.strict, "strict", false, "fail closed: exit non-zero on any error (also strict = true in the config)")
	fs.StringVar(&o.root, "root", "/", "host filesystem root holding /proc and /sys")
	fs.StringVar(&o.logFile, "log-file", "", "log destination overriding the config's log.file: a path, syslog or stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-hook: unexpected argument %q; run 'oomguard-hook help'\n", fs.Arg(0))
		return 2
	}
	return runHook(o, stdin, stderr)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `oomguard-hook: OCI runtime hook that sets oom_score_adj and memory.oom.group
from the oomguard policy when a container is created.

Usage:
  oomguard-hook [--config FILE] [--strict] [--log-file DEST] [--root DIR]
      Run as a createRuntime (or prestart) hook: reads the OCI state on stdin.
  oomguard-hook install [--hooks-dir DIR] [--hook-path PATH] [--config FILE] [--stage STAGE] [--dry-run]
      Write oomguard.json into a hooks.d directory (CRI-O, podman). Idempotent.
  oomguard-hook print-config [same flags as install]
      Print that JSON instead of writing it.
`)
}
