// Command noopplugin is an NRI plugin that subscribes to CreateContainer and
// changes nothing: the baseline oomguard-nri is measured against.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type noop struct{}

func (noop) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func main() {
	socket := flag.String("socket", api.DefaultSocketPath, "NRI socket")
	flag.Parse()
	s, err := stub.New(noop{}, stub.WithPluginName("noop"), stub.WithPluginIdx("10"), stub.WithSocketPath(*socket))
	if err != nil {
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		os.Exit(1)
	}
}
