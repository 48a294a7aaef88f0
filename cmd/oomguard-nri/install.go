package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/install"
)

func cmdInstall(name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("oomguard-nri "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o install.NRIOptions
	fs.StringVar(&o.Root, "root", "/", "the node's filesystem root")
	fs.BoolVar(&o.DryRun, "dry-run", false, "show what would change without changing anything")
	fs.StringVar(&o.Runtime, "runtime", "auto", "auto, containerd, crio, or both")
	fs.StringVar(&o.Binary, "binary", "", "the oomguard-nri binary to install (default: this one)")
	fs.StringVar(&o.ConfigPath, "config", config.DefaultPath, "the oomguard configuration the plugin reads, as a path on the node")
	fs.BoolVar(&o.NRIOnly, "nri-only", false, "only enable NRI in the runtime, for the DaemonSet: no plugin binary or config link")
	fs.StringVar(&o.Socket, "socket", "", "the NRI socket the runtime listens on (default: the configuration's nri.socket)")
	fs.BoolVar(&o.Restart, "restart-runtime", false, "restart the runtime through the node's systemd when its configuration changed (running containers keep running)")
	fs.IntVar(&o.ContainerdConfigVersion, "containerd-config-version", 0, "config version for a new containerd config.toml: 2 (containerd 1.7) or 3 (2.x); 0 keeps the existing one's")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-nri %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	var err error
	if name == "uninstall" {
		err = install.UninstallNRI(o.Root, o.DryRun, o.Restart, stdout)
	} else {
		err = install.NRI(o, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-nri %s: %v\n", name, err)
		return 1
	}
	return 0
}
