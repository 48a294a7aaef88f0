// Command nriother is another NRI plugin on the cluster scenarios' node, as
// a GPU node has its own: it sets what oomguard sets — oom_score_adj and
// memory.oom.group, through NRI — for the pods bearing its label, so that
// the test sees what the real runtimes do with two plugins on one node.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	key, value string
	score      int
	log        *slog.Logger
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if pod.GetLabels()[p.key] != p.value {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	v := p.score
	adj.SetLinuxOomScoreAdj(&v)
	adj.AddLinuxUnified("memory.oom.group", "1")
	p.log.Info("set", "pod", pod.GetNamespace()+"/"+pod.GetName(), "container", ctr.GetName(), "oom_score_adj", v, "memory.oom.group", 1)
	return adj, nil, nil
}

func main() {
	idx := flag.String("idx", "05", "the plugin's NRI index")
	socket := flag.String("socket", "/var/run/nri/nri.sock", "the runtime's NRI socket")
	label := flag.String("label", "oomguard.test/other=claim", "the pod label (key=value) of the pods it sets")
	score := flag.Int("score", 500, "the oom_score_adj it sets")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	k, v, ok := strings.Cut(*label, "=")
	if !ok {
		fmt.Fprintln(os.Stderr, "nriother: --label wants key=value")
		os.Exit(2)
	}
	s, err := stub.New(&plugin{key: k, value: v, score: *score, log: log},
		stub.WithSocketPath(*socket), stub.WithPluginName("other"), stub.WithPluginIdx(*idx))
	if err != nil {
		log.Error("nriother", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("connecting", "socket", *socket, "index", *idx)
	if err := s.Run(ctx); err != nil && ctx.Err() == nil {
		log.Error("nriother", "err", err)
		os.Exit(1)
	}
}
