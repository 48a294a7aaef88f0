//go:build containerd_2_1

package main

import "github.com/containerd/containerd/v2/cmd/containerd/command"

// run is containerd's main up to 2.1 (urfave/cli v2).
func run(args []string) error { return command.App().Run(args) }
