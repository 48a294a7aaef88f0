// mkimage builds oomguard's release image (make image): an OCI image layout
// of the static programs for linux/amd64 and linux/arm64, the same digest for
// the same commit, pushed when asked.
//
//	mkimage --bin build/image-bin --out build/image [--push REGISTRY/REPO:TAG]
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/oomguard/oomguard/internal/release"
)

func main() {
	bin := flag.String("bin", "build/image-bin", "directory with ARCH/PROGRAM binaries (make image builds them)")
	out := flag.String("out", "build/image", "OCI image layout to write")
	push := flag.String("push", "", "also push to this reference, e.g. registry.example/oomguard:v1")
	var m release.Meta
	flag.StringVar(&m.Version, "version", "dev", "release the image carries")
	flag.StringVar(&m.Commit, "commit", "unknown", "commit the image carries")
	epoch := flag.Int64("created", 0, "creation time, seconds since 1970 (the commit's time)")
	flag.Parse()
	m.Created = time.Unix(*epoch, 0).UTC()
	if err := release.Publish(os.Stdout, *bin, *out, *push, m); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}
