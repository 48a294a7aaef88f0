// mkrelease writes oomguard's release (make release): the image as an OCI
// image layout, the Helm chart packaged and pinned to the image's digest,
// the image's SBOM (SPDX, from the binaries' build information) and
// SHA256SUMS, the same bytes for the same commit; pushed only when asked.
// With --image-only it writes the image alone (make image).
//
//	mkrelease --bin build/image-bin --chart deploy/helm/oomguard --out build/release [--push-image REF] [--push-chart oci://REGISTRY/PATH] [--sign-key FILE]
//	mkrelease --image-only --bin build/image-bin --out build/image [--push-image REF]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/oomguard/oomguard/cmd/mkrelease/internal/release"
	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/internal/cli"
)

func main() {
	var o release.Options
	var epoch int64
	var imageOnly bool
	var signKey string
	prog := &cli.Command{
		Name:    "mkrelease",
		Summary: "writes oomguard's release: image, chart, SBOM and checksums (make release, make image).",
		Help:    "Write the release into --out; push the image and the chart when asked.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.Bin, "bin", "build/image-bin", "`DIR` with ARCH/PROGRAM binaries (make image-bin builds them)")
			fs.StringVar(&o.Chart, "chart", "deploy/helm/oomguard", "the Helm chart's `DIR`")
			fs.StringVar(&o.Out, "out", "build/release", "`DIR` to write the release into (emptied first)")
			fs.BoolVar(&imageOnly, "image-only", false, "write the image alone, as an OCI image layout in --out (make image)")
			fs.StringVar(&o.PushImage, "push-image", "", "push the image to `REF`, e.g. registry.example/oomguard:v1 (the chart then names that repository)")
			fs.StringVar(&o.PushChart, "push-chart", "", "push the chart to `oci://REGISTRY/PATH`, as helm push does")
			fs.StringVar(&o.Meta.Version, "release", "dev", "`RELEASE` the image and the chart carry")
			fs.StringVar(&o.Meta.Commit, "commit", "unknown", "`COMMIT` the image carries")
			fs.Int64Var(&epoch, "created", 0, "creation time, `SECONDS` since 1970 (the commit's time)")
			fs.StringVar(&signKey, "sign-key", "", "sign SHA256SUMS, and the image (with its SBOM and provenance as attestations) and the chart when pushed, with the private key in `FILE` (cosign generate-key-pair's, its password in $COSIGN_PASSWORD, or PKCS#8 PEM)")
		},
		Run: func(_ context.Context, _ []string, s cli.IO) int {
			o.Meta.Created = time.Unix(epoch, 0).UTC()
			if signKey != "" {
				if imageOnly {
					fmt.Fprintln(s.Stderr, "mkrelease: --sign-key signs a release: drop --image-only (make release)")
					return 2
				}
				b, err := os.ReadFile(signKey)
				if err == nil {
					o.Signer, err = imagepatch.LoadSigner(b, []byte(os.Getenv("COSIGN_PASSWORD")))
				}
				if err != nil {
					fmt.Fprintf(s.Stderr, "mkrelease: --sign-key %s: %v\n", signKey, err)
					return 1
				}
			}
			var err error
			if imageOnly {
				_, err = release.Publish(s.Stdout, o.Bin, o.Out, o.PushImage, o.Meta)
			} else {
				err = release.Release(s.Stdout, o)
			}
			if err != nil {
				fmt.Fprintf(s.Stderr, "mkrelease: %v\n", err)
				return 1
			}
			return 0
		},
	}
	os.Exit(cli.Main(context.Background(), prog, os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
}
