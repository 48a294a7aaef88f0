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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/logging"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "install":
			return cmdInstall(args[1:], stdout, stderr, false)
		case "uninstall":
			return cmdInstall(args[1:], stdout, stderr, true)
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
	cfg, err := loadConfig(*cfgPath)
	log := logging.New(cfg.Log, stderr).With("component", "oomguard-nri")
	if err != nil {
		log.Warn("configuration", "err", err)
	}
	if *socket != "" {
		cfg.NRI.Socket = *socket
	}
	if *metricsAddr != "" {
		cfg.NRI.MetricsAddress = *metricsAddr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := newMetrics()
	if cfg.NRI.MetricsAddress != "" {
		if err := m.serve(ctx, cfg.NRI.MetricsAddress, log); err != nil {
			log.Error("cannot serve metrics", "address", cfg.NRI.MetricsAddress, "err", err)
			return 1
		}
	}
	p := newPlugin(cfg, *root, log, m)
	if err := serve(ctx, p, cfg.NRI, os.Getenv("NRI_PLUGIN_SOCKET") != ""); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

const usage = `oomguard-nri: NRI plugin that sets oom_score_adj and memory.oom.group from the
oomguard policy when containerd or CRI-O creates a container.

Usage:
  oomguard-nri [--config FILE] [--socket PATH] [--root DIR] [--metrics-address ADDR]
      Run. Launched by the runtime from /opt/nri/plugins it uses the runtime's
      connection; otherwise it connects to the NRI socket and reconnects when the
      runtime restarts.
  oomguard-nri install [--root DIR] [--runtime auto|containerd|crio] [--dry-run] [--binary PATH] [--config FILE]
      Put the plugin where the runtime launches it and enable NRI with drop-in files.
  oomguard-nri uninstall [--root DIR] [--dry-run]
      Undo install.
`

// loadConfig reads the configuration; a missing default file means the
// defaults (no rules) and is said once.
func loadConfig(flagPath string) (*config.Config, error) {
	path := config.Path(flagPath)
	cfg, err := config.Load(path)
	if err == nil {
		return cfg, nil
	}
	return config.Default(), fmt.Errorf("%w; running with no rules until the runtime passes a configuration", err)
}

// serve runs the plugin until ctx ends. When the runtime launched it, the
// connection is the runtime's and ends with it; otherwise it reconnects with
// backoff, so a runtime restart never leaves it crash-looping.
func serve(ctx context.Context, p *plugin, cfg config.NRI, launched bool) error {
	go p.verifyLoop(ctx, cfg.VerifyInterval.Duration)
	backoff := time.Second
	for {
		start := time.Now()
		err := connectOnce(ctx, p, cfg, launched)
		p.m.setConnected(false)
		if ctx.Err() != nil {
			return nil
		}
		if launched {
			return fmt.Errorf("connection from the runtime closed: %w", err)
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		p.log.Warn("not connected to the runtime; retrying", "socket", cfg.Socket, "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func connectOnce(ctx context.Context, p *plugin, cfg config.NRI, launched bool) error {
	opts := []stub.Option{stub.WithLogger(nriLogger{p.log}), stub.WithSocketPath(cfg.Socket)}
	if !launched {
		opts = append(opts, stub.WithPluginName(cfg.PluginName), stub.WithPluginIdx(cfg.PluginIndex))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	err = s.Run(ctx)
	if err == nil {
		err = errors.New("connection closed")
	}
	return err
}

// nriLogger sends the NRI library's log through slog.
type nriLogger struct{ l *slog.Logger }

func (n nriLogger) Debugf(_ context.Context, f string, a ...any) { n.l.Debug(fmt.Sprintf(f, a...)) }
func (n nriLogger) Infof(_ context.Context, f string, a ...any)  { n.l.Debug(fmt.Sprintf(f, a...)) }
func (n nriLogger) Warnf(_ context.Context, f string, a ...any)  { n.l.Warn(fmt.Sprintf(f, a...)) }
func (n nriLogger) Errorf(_ context.Context, f string, a ...any) { n.l.Error(fmt.Sprintf(f, a...)) }

var _ nrilog.Logger = nriLogger{}
