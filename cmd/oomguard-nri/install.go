package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/install"
	"github.com/oomguard/oomguard/internal/systemd"
)

func installCommand(name, help string) *cli.Command {
	var o install.NRIOptions
	var restart bool
	return &cli.Command{
		Name: name, Help: help,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.Root, "root", "/", "the node's filesystem root `DIR`")
			fs.BoolVar(&o.DryRun, "dry-run", false, "show what would change without changing anything")
			fs.BoolVar(&restart, "restart-runtime", false, "restart the runtime through the node's systemd when its configuration changed, or it has not read it since (running containers keep running)")
			if name == "uninstall" {
				return
			}
			fs.StringVar(&o.ProcRoot, "proc-root", "", "the `DIR` whose /proc shows the node's processes, to tell whether the runtime read its configuration (default: --root)")
			fs.StringVar(&o.StateFile, "state", "", "write what is left to do (the runtimes still to restart) to `FILE`, for the plugin beside it")
			fs.StringVar(&o.Runtime, "runtime", "auto", "`RUNTIME`: auto, containerd, crio, or both")
			fs.StringVar(&o.Binary, "binary", "", "the oomguard-nri binary `PATH` to install (default: this one)")
			fs.StringVar(&o.ConfigPath, "config", config.DefaultPath, "the oomguard configuration `FILE` the plugin reads, as a path on the node")
			fs.BoolVar(&o.NRIOnly, "nri-only", false, "only enable NRI in the runtime, for the DaemonSet: no plugin binary or config link")
			fs.StringVar(&o.Socket, "socket", "", "the NRI socket `PATH` the runtime listens on (default: the configuration's nri.socket)")
			fs.BoolVar(&o.FailClosed, "fail-closed", false, "turn on the runtime's NRI validator (containerd 2.2, CRI-O 1.34 and later): a container whose pod lists oomguard in its required-plugins.noderesource.dev annotation is not created while oomguard is not connected; refuses a configuration with a tolerate_missing_plugins_annotation")
			fs.IntVar(&o.ContainerdConfigVersion, "containerd-config-version", 0, "config `VERSION` for a new containerd config.toml: 2 (read by containerd 1.7 and 2.x) or 3 (2.x's own); 0: 2 where there is none, the existing one's otherwise")
		},
		Run: func(_ context.Context, _ []string, s cli.IO) int {
			if restart {
				o.Restart = systemd.RestartUnit
			}
			if o.ProcRoot == "" {
				o.ProcRoot = o.Root
			}
			var err error
			if name == "uninstall" {
				err = install.UninstallNRI(o.Root, o.DryRun, o.Restart, s.Stdout)
			} else {
				err = install.NRI(o, s.Stdout)
			}
			if err != nil {
				fmt.Fprintf(s.Stderr, "oomguard-nri %s: %v\n", name, err)
				return 1
			}
			return 0
		},
	}
}
