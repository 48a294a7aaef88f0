// Command containerd is containerd 1.7 built from its Go module, with the
// built-in plugins (CRI and NRI among them), for oomguard's VM tests.
package main

import (
	"fmt"
	"os"

	"github.com/containerd/containerd/cmd/containerd/command"

	_ "github.com/containerd/containerd/cmd/containerd/builtins"
)

func main() {
	app := command.App()
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "containerd: %s\n", err)
		os.Exit(1)
	}
}
