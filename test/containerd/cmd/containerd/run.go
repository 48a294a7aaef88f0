//go:build !containerd_2_1

package main

import (
	"context"

	"github.com/containerd/containerd/v2/cmd/containerd/command"
)

// run is containerd's main: since 2.2, App is a urfave/cli v3 command,
// whose Run takes a context.
func run(args []string) error { return command.App().Run(context.Background(), args) }
