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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/configcheck"
	"github.com/oomguard/oomguard/internal/kubeapi"
	"github.com/oomguard/oomguard/internal/logging"
	"github.com/oomguard/oomguard/internal/podevents"
	"github.com/oomguard/oomguard/internal/systemd"
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
	eventBudget                        podevents.Budget
	apiServer, apiToken, apiCA, node   string

	state, slots                  string
	restartRuntime, nodeCondition bool
	maxAtOnce                     int

	supervise, failClosed bool
	healthSocket          string
}

func program() *cli.Command {
	var f flags
	var c *cli.Command
	c = &cli.Command{
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
			fs.Float64Var(&f.eventBudget.QPS, "event-qps", 1, "with --events: the node's Event writes a second, on average")
			fs.IntVar(&f.eventBudget.Burst, "event-burst", 25, "with --events: the node's Event writes at once, at most")
			fs.IntVar(&f.eventBudget.Aggregate, "event-aggregate", 10, "with --events: more pods with Events due at once than this, one Event on the node names them instead")
			fs.StringVar(&f.apiServer, "api-server", "", "the API server's `URL` for Events, the node's condition and restart slots (default: the pod's KUBERNETES_SERVICE_HOST)")
			fs.StringVar(&f.apiToken, "api-token-file", kubeapi.ServiceAccount+"/token", "the bearer token `FILE` for the API server")
			fs.StringVar(&f.apiCA, "api-ca-file", kubeapi.ServiceAccount+"/ca.crt", "the API server's CA `FILE`")
			fs.StringVar(&f.node, "node-name", os.Getenv("NODE_NAME"), "the node's `NAME`, the Events' source (default $NODE_NAME)")
			fs.StringVar(&f.state, "runtime-state", "", "what install --nri-only --state left in `FILE`: while the runtime it names has not restarted, the plugin is waiting, not failing (/healthz 200, oomguard_runtime_restart_pending 1)")
			fs.BoolVar(&f.nodeCondition, "node-condition", false, "with --runtime-state: keep the node's condition "+nriplugin.ConditionType+" (the service account must be allowed to patch nodes/status)")
			fs.BoolVar(&f.restartRuntime, "restart-runtime", false, "with --runtime-state: restart the waiting runtime through the node's systemd (its /run/systemd under --root)")
			fs.StringVar(&f.slots, "restart-slots", "", "with --restart-runtime: restart only while holding one of the Leases `NAMESPACE/NAME`-0… (the service account must be allowed to create, get, patch and delete them)")
			fs.IntVar(&f.maxAtOnce, "restart-max-at-once", 1, "with --restart-slots: how many nodes restart their runtime at once, cluster-wide")
			fs.BoolVar(&f.supervise, "supervise", false, "run the plugin as a worker of this process, started again at once (then after at most 2 s) when it dies; the container's own memory.oom.group is set to 0 so that an OOM in it kills the worker, not both")
			fs.BoolVar(&f.failClosed, "fail-closed", false, "the node was installed with install --fail-closed: say (log, oomguard_fail_closed_enforced) whether the runtime can refuse containers whose pod requires oomguard while it is away")
			fs.StringVar(&f.healthSocket, "health-socket", "", "serve /healthz on a unix socket at `PATH` too, for the pod's own readiness probe (oomguard-nri health)")
		},
		Run: func(_ context.Context, _ []string, s cli.IO) int {
			if f.slots != "" {
				if ns, name, ok := strings.Cut(f.slots, "/"); !ok || ns == "" || name == "" || f.maxAtOnce < 1 {
					return cli.Usagef(s.Stderr, c, "--restart-slots takes NAMESPACE/NAME, --restart-max-at-once 1 or more")
				}
			}
			if (f.slots != "" || f.nodeCondition) && f.node == "" {
				return cli.Usagef(s.Stderr, c, "--restart-slots and --node-condition need the node's name: --node-name or $NODE_NAME")
			}
			if f.eventBudget.QPS <= 0 || f.eventBudget.Burst < 1 || f.eventBudget.Aggregate < 1 {
				return cli.Usagef(s.Stderr, c, "--event-qps must be above 0, --event-burst and --event-aggregate 1 or more")
			}
			if f.supervise && os.Getenv(workerEnv) == "" {
				return supervisor(f, s.Stderr)
			}
			return plugin(f, s.Stderr)
		},
		Commands: []*cli.Command{
			installCommand("install", "Put the plugin where the runtime launches it and enable NRI with drop-in\n"+
				"files; --nri-only for the DaemonSet, which runs the plugin itself."),
			installCommand("uninstall", "Undo install."),
			configcheck.Command(),
			healthCommand(),
		},
	}
	return c
}

func plugin(f flags, stderr io.Writer) int {
	cfg, cfgErr := config.Find(f.cfgPath)
	if cfgErr != nil {
		cfg = config.Default()
	}
	launched := os.Getenv("NRI_PLUGIN_SOCKET") != ""
	logCfg := logging.Options{Level: cfg.Log.Level, Format: cfg.Log.Format}
	logCfg.File = "stderr"
	if launched { // the runtime discards a launched plugin's output
		logCfg.File = cfg.NRI.LogFile
	}
	log, closer, logErr := logging.Open(logCfg, "oomguard-nri", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-nri")
	log.Info("starting", "version", version.Version, "commit", version.Commit)
	setGCPercent()
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
	restarts, _ := strconv.Atoi(os.Getenv(restartsEnv))
	o := nriplugin.Options{Config: cfg, ConfigErr: cfgErr, ConfigPath: config.Path(f.cfgPath), Root: f.root, Log: log, Launched: launched,
		HealthSocket: f.healthSocket, Restarts: restarts, FailClosed: f.failClosed}
	var api *kubeapi.Client
	if f.events || f.nodeCondition || f.slots != "" {
		var err error
		if api, err = kubeapi.FromFiles(f.apiServer, f.apiToken, f.apiCA); err != nil {
			log.Error("no API server: no Events, node condition or restart slots; OOM kills are still logged and counted", "err", err)
		}
	}
	if f.events && api != nil {
		o.Events = podevents.NewRecorder(api, "oomguard-nri", f.node, f.eventBudget, log)
	}
	if f.state != "" {
		o.Runtime = &nriplugin.RuntimeWatch{State: f.state}
		if f.nodeCondition && api != nil {
			o.Runtime.Condition = &kubeapi.NodeCondition{API: api, Node: f.node, Type: nriplugin.ConditionType}
		}
		if f.restartRuntime {
			o.Runtime.Restart = systemd.RestartUnit
			if f.slots != "" && api == nil {
				o.Runtime.Restart = nil // without its slots no restart: the pace is the operator's
				log.Error("not restarting the runtime: no API server for the restart slots")
			} else if f.slots != "" {
				ns, name, _ := strings.Cut(f.slots, "/")
				o.Runtime.Slots = &kubeapi.Slots{API: api, Namespace: ns, Name: name, Max: f.maxAtOnce, Holder: f.node, Duration: time.Minute}
			}
		}
	}
	if err := nriplugin.New(o).Run(ctx); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}
