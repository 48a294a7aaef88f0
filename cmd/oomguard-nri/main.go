// oomguard-nri is an NRI plugin for containerd (≥ 1.7) and CRI-O (≥ 1.26): it
// makes the runtime create the containers the oomguard policy selects with the
// right oom_score_adj and memory.oom.group, keeps them so, and fixes the
// containers that already ran when it started.
//
//	oomguard-nri [--config FILE] [--socket PATH]   run (launched by the runtime, or as a DaemonSet)
//	oomguard-nri install [--runtime R] [--dry-run] …
//	oomguard-nri uninstall [--dry-run] …
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/oomguard/oomguard/internal/version"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/logging"
	nriplugin "github.com/oomguard/oomguard/nri-plugin"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `oomguard-nri: NRI plugin that sets oom_score_adj and memory.oom.group from the
oomguard policy when containerd or CRI-O creates a container.

Usage:
  oomguard-nri [--config FILE] [--socket PATH] [--root DIR] [--metrics-address ADDR]
      Run. Launched by the runtime from /opt/nri/plugins it uses the runtime's
      connection; otherwise it connects to the NRI socket and reconnects when the
      runtime restarts.
  oomguard-nri install [--root DIR] [--runtime auto|containerd|crio] [--dry-run] [--binary PATH] [--config FILE]
                       [--nri-only] [--socket PATH] [--restart-runtime]
      Put the plugin where the runtime launches it and enable NRI with drop-in
      files; --nri-only for the DaemonSet, which runs the plugin itself.
  oomguard-nri uninstall [--root DIR] [--dry-run] [--restart-runtime]
      Undo install.
`

func run(args []string, stdout, stderr io.Writer) int {
	if version.Asked(args) {
		fmt.Fprintln(stdout, version.String("oomguard-nri"))
		return 0
	}
	if len(args) > 0 {
		switch args[0] {
		case "install", "uninstall":
			return cmdInstall(args[0], args[1:], stdout, stderr)
		case "help", "-h", "--help":
			fmt.Fprint(stdout, usage)
			return 0
		}
	}
	fs := flag.NewFlagSet("oomguard-nri", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
	socket := fs.String("socket", "", "NRI socket (default: the config's nri.socket)")
	root := fs.String("root", "/", "host filesystem root holding /proc and /sys")
	metricsAddr := fs.String("metrics-address", "", "serve /metrics and /healthz here (default: the config's nri.metrics_address)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-nri: unexpected argument %q; run 'oomguard-nri help'\n", fs.Arg(0))
		return 2
	}
	cfg, cfgErr := config.Find(*cfgPath)
	if cfgErr != nil {
		cfg = config.Default()
	}
	launched := os.Getenv("NRI_PLUGIN_SOCKET") != ""
	logCfg := cfg.Log
	logCfg.File = "stderr"
	if launched { // the runtime discards a launched plugin's output
		logCfg.File = cfg.NRI.LogFile
	}
	log, closer, logErr := logging.Open(logCfg.Logging(), "oomguard-nri", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-nri")
	log.Info("starting", "version", version.Version, "commit", version.Commit)
	if logErr != nil {
		log.Warn("cannot log where configured", "err", logErr)
	}
	switch {
	case cfgErr != nil:
		log.Warn("configuration unusable; running with no rules until the runtime passes a configuration", "err", cfgErr)
	case cfg.Missing:
		log.Warn("no configuration; running with no rules until the runtime passes one", "path", config.DefaultPath)
	}
	if *socket != "" {
		cfg.NRI.Socket = *socket
	}
	if *metricsAddr != "" {
		cfg.NRI.MetricsAddress = *metricsAddr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := nriplugin.NewMetrics()
	if cfg.NRI.MetricsAddress != "" {
		if err := m.Serve(ctx, cfg.NRI.MetricsAddress, log); err != nil {
			log.Error("cannot serve metrics", "address", cfg.NRI.MetricsAddress, "err", err)
			return 1
		}
	}
	p := nriplugin.New(cfg, cfgErr, *root, log, m)
	if err := p.Serve(ctx, cfg.NRI, launched); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}
