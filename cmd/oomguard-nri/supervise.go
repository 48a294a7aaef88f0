package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/logging"
	"github.com/oomguard/oomguard/internal/supervise"
)

// What the supervisor tells its worker: that it is the worker, and how
// often a worker was started before it.
const (
	workerEnv   = "OOMGUARD_NRI_WORKER"
	restartsEnv = "OOMGUARD_NRI_RESTARTS"
)

// supervisorScore is the supervisor's own oom_score_adj: below the
// worker's (kubelet gives a node-critical pod -997), so that an OOM in
// the container takes the worker, which the supervisor starts again.
const supervisorScore = -998

// supervisor runs the plugin as its worker and starts it again when it
// dies: kubelet's CrashLoopBackOff never applies to a crash, and an OOM in
// the container kills the worker alone (its memory.oom.group set to 0).
func supervisor(f flags, stderr io.Writer) int {
	cfg, err := config.Find(f.cfgPath)
	if err != nil {
		cfg = config.Default()
	}
	log, closer, _ := logging.Open(logging.Options{Level: cfg.Log.Level, Format: cfg.Log.Format, File: "stderr"}, "oomguard-nri", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-nri", "part", "supervisor")
	protectSelf(f.root, cfg, os.Getpid(), func(msg string, args ...any) { log.Info(msg, args...) })
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, supervise.Stopping...)
	starts := 0
	return supervise.Run(signals, supervise.Options{
		Command: func(int) *exec.Cmd {
			cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
			cmd.Env = append(os.Environ(), workerEnv+"=1", restartsEnv+"="+strconv.Itoa(starts))
			cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
			starts++
			return cmd
		},
		Backoff: supervise.DefaultBackoff, Log: log,
		Started: func(pid int) { log.Info("started the plugin", "pid", pid, "start", starts) },
	})
}

// protectSelf sets the supervisor's container's memory.oom.group to 0 and
// its own score below the worker's: kubelet sets the group to 1, and an
// OOM in the container would then kill the supervisor with the worker, and
// kubelet's backoff would apply again. It goes through enforce, as every
// write of oomguard does: the container's own cgroup, found and checked.
func protectSelf(root string, cfg *config.Config, pid int, say func(string, ...any)) {
	c, err := enforce.NewNode(root, cfg.Containment.CgroupParents).Locate("", pid)
	if err != nil {
		say("cannot find the plugin's own container: an OOM in it kills the supervisor too", "err", err)
		return
	}
	group := c.Group(false)
	score := c.Score(pid, supervisorScore)
	say("own container", "cgroup", c.Cgroup(), enforce.SettingGroup, group.String(), "supervisor_"+enforce.SettingScore, score.String())
}

// healthCommand is the pod's readiness probe: /healthz of this pod's own
// plugin, on its socket (--health-socket), not the node's port, which
// answers for whichever instance holds the node's lock.
func healthCommand() *cli.Command {
	var socket string
	var timeout time.Duration
	return &cli.Command{Name: "health",
		Help: "Ask the plugin running beside (--health-socket) whether it is healthy: exit 0\nand print its answer when it is, exit 1 and say why when it is not.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&socket, "socket", "/run/oomguard-health/health.sock", "the plugin's health socket `PATH`")
			fs.DurationVar(&timeout, "timeout", 3*time.Second, "give up after `DURATION`")
		},
		Run: func(ctx context.Context, _ []string, s cli.IO) int {
			c := &http.Client{Timeout: timeout, Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "unix", socket)
				}}}
			rsp, err := c.Get("http://oomguard-nri/healthz")
			if err != nil {
				fmt.Fprintf(s.Stderr, "oomguard-nri health: %v\n", err)
				return 1
			}
			defer rsp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(rsp.Body, 4096))
			if rsp.StatusCode != http.StatusOK {
				fmt.Fprintf(s.Stderr, "oomguard-nri health: %s: %s\n", rsp.Status, strings.TrimSpace(string(b)))
				return 1
			}
			s.Stdout.Write(b)
			return 0
		}}
}
