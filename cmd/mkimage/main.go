// mkimage builds oomguard's release image (make image): an OCI image layout
// of the static programs for linux/amd64 and linux/arm64, the same digest for
// the same commit, pushed when asked.
//
//	mkimage --bin build/image-bin --out build/image [--push REGISTRY/REPO:TAG]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/release"
)

func main() {
	var bin, out, push string
	var epoch int64
	var m release.Meta
	prog := &cli.Command{
		Name:    "mkimage",
		Summary: "builds oomguard's release image as an OCI image layout (make image).",
		Help:    "Build the image from ARCH/PROGRAM binaries; push it when asked.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&bin, "bin", "build/image-bin", "`DIR` with ARCH/PROGRAM binaries (make image builds them)")
			fs.StringVar(&out, "out", "build/image", "OCI image layout `DIR` to write")
			fs.StringVar(&push, "push", "", "also push to this `REF`erence, e.g. registry.example/oomguard:v1")
			fs.StringVar(&m.Version, "release", "dev", "`RELEASE` the image carries")
			fs.StringVar(&m.Commit, "commit", "unknown", "`COMMIT` the image carries")
			fs.Int64Var(&epoch, "created", 0, "creation time, `SECONDS` since 1970 (the commit's time)")
		},
		Run: func(_ context.Context, _ []string, s cli.IO) int {
			m.Created = time.Unix(epoch, 0).UTC()
			if err := release.Publish(s.Stdout, bin, out, push, m); err != nil {
				fmt.Fprintf(s.Stderr, "mkimage: %v\n", err)
				return 1
			}
			return 0
		},
	}
	os.Exit(cli.Main(context.Background(), prog, os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
}
