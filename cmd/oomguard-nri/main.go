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
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/configcheck"
	"github.com/oomguard/oomguard/internal/kubeapi"
	"github.com/oomguard/oomguard/internal/logging"
	"github.com/oomguard/oomguard/internal/podevents"
	"github.com/oomguard/oomguard/internal/version"
	nriplugin "github.com/oomguard/oomguard/nri-plugin"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Main(context.Background(), program(), args, cli.IO{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr})
}

// flags of the plugin's run.
type flags struct {
	cfgPath, socket, root, metricsAddr string
	events                             bool
	apiServer, node                    string
}

func program() *cli.Command {
	var f flags
	return &cli.Command{
		Name:    "oomguard-nri",
		Summary: "NRI plugin that sets oom_score_adj and memory.oom.group from the\noomguard policy when containerd or CRI-O creates a container.",
		Help: "Run. Launched by the runtime from /opt/nri/plugins it uses the runtime's\n" +
			"connection; otherwise it connects to the NRI socket and reconnects when the\nruntime restarts.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&f.cfgPath, "config", "", "configuration `FILE` (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
			fs.StringVar(&f.socket, "socket", "", "NRI socket `PATH` (default: the config's nri.socket)")
			fs.StringVar(&f.root, "root", "/", "host filesystem `DIR` holding /proc and /sys")
			fs.StringVar(&f.metricsAddr, "metrics-address", "", "serve /metrics and /healthz at `ADDR` (default: the config's nri.metrics_address)")
			fs.BoolVar(&f.events, "events", false, "record a Warning Event on the pod for each OOM kill in it (the pod's service account must be allowed to create and patch events)")
			fs.StringVar(&f.apiServer, "api-server", "", "the API server's `URL` for Events (default: the pod's KUBERNETES_SERVICE_HOST)")
			fs.StringVar(&f.node, "node-name", os.Getenv("NODE_NAME"), "the node's `NAME`, the Events' source (default $NODE_NAME)")
		},
		Run: func(_ context.Context, _ []string, s cli.IO) int { return plugin(f, s.Stderr) },
		Commands: []*cli.Command{
			installCommand("install", "Put the plugin where the runtime launches it and enable NRI with drop-in\n"+
				"files; --nri-only for the DaemonSet, which runs the plugin itself."),
			installCommand("uninstall", "Undo install."),
			configcheck.Command(),
		},
	}
}

func plugin(f flags, stderr io.Writer) int {
	cfg, cfgErr := config.Find(f.cfgPath)
	if cfgErr != nil {
		cfg = config.Default()
	}
	launched := os.Getenv("NRI_PLUGIN_SOCKET") != ""
	logCfg := cfg.Log.Logging()
	logCfg.File = "stderr"
	if launched { // the runtime discards a launched plugin's output
		logCfg.File = cfg.NRI.LogFile
	}
	log, closer, logErr := logging.Open(logCfg, "oomguard-nri", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-nri")
	log.Info("starting", "version", version.Version, "commit", version.Commit)
	setMemoryLimit(log)
	if logErr != nil {
		log.Warn("cannot log where configured", "err", logErr)
	}
	switch {
	case cfgErr != nil:
		log.Warn("configuration unusable; running with no rules until the runtime passes a configuration", "err", cfgErr)
	case cfg.Missing:
		log.Warn("no configuration; running with no rules until the runtime passes one", "path", config.DefaultPath)
	}
	if f.socket != "" {
		cfg.NRI.Socket = f.socket
	}
	if f.metricsAddr != "" {
		cfg.NRI.MetricsAddress = f.metricsAddr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := nriplugin.NewMetrics()
	if cfg.NRI.MetricsAddress != "" {
		m.Serve(ctx, cfg.NRI.MetricsAddress, log)
	}
	p := nriplugin.New(cfg, cfgErr, f.root, log, m)
	if f.events {
		c, err := kubeapi.InCluster(f.apiServer)
		if err != nil {
			log.Error("not recording Events; OOM kills are still logged and counted", "err", err)
		} else {
			rec := podevents.NewRecorder(c, "oomguard-nri", f.node, log)
			go rec.Run(ctx)
			p.RecordEvents(rec)
		}
	}
	go p.WatchConfig(ctx, config.Path(f.cfgPath), cfg.NRI.ReloadInterval.Duration)
	if err := p.Serve(ctx, cfg.NRI, launched); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}
