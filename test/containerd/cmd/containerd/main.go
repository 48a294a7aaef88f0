// Command containerd is containerd 2.x built from its Go module, with the
// built-in plugins (CRI and NRI among them), for oomguard's VM tests. The
// module's go.mod pins the newest release; go.2.1.4.mod an older one, built
// with the tag containerd_2_1 (its App().Run takes no context).
package main

import (
	"fmt"
	"os"

	_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "containerd: %s\n", err)
		os.Exit(1)
	}
}
