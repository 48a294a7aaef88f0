// Command nrirun is a container runtime's NRI side in the VM of the short
// scenarios, where no containerd runs: it starts oomguard-nri as the
// DaemonSet does (an external plugin), then runs one runc bundle as
// containerd does with NRI (CreateContainer, runc create, StartContainer,
// runc start), and exits with the container's status.
//
//	nrirun --bundle DIR --id ID [--plugin BIN --config FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/oomguard/oomguard/test/nriruntime"
)

func main() {
	bundle := flag.String("bundle", "", "the runc bundle")
	id := flag.String("id", "", "the container's id")
	plugin := flag.String("plugin", "/oomguard/bin/oomguard-nri", "the plugin to start")
	config := flag.String("config", "/oomguard/config.toml", "its configuration")
	flag.Parse()
	if *bundle == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "usage: nrirun --bundle DIR --id ID [--plugin BIN --config FILE]")
		os.Exit(2)
	}
	code, err := run(*bundle, *id, *plugin, *config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nrirun:", err)
		os.Exit(125)
	}
	os.Exit(code)
}

func run(bundle, id, plugin, config string) (int, error) {
	dir, err := os.MkdirTemp("/run", "nri-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	log, err := os.OpenFile("/tmp/plugin.log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer log.Close()
	nriruntime.SetLog(log)
	rt, err := nriruntime.Start(dir, nil, nil)
	if err != nil {
		return 0, err
	}
	defer rt.Stop()
	rt.PluginLog = log
	p, err := rt.StartPlugin(plugin, "--config", config)
	if err != nil {
		return 0, err
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	return rt.RunBundle(context.Background(), "/run/runc", bundle, id, "default", os.Stdout, os.Stderr, "--no-pivot")
}
