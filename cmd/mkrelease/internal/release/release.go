package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Options are what `make release` gives Release.
type Options struct {
	Bin   string // ARCH/PROGRAM binaries (make image builds them)
	Chart string // the chart's directory
	Out   string // where the release goes
	Meta  Meta
	// PushImage (REGISTRY/REPO:TAG) and PushChart (oci://REGISTRY/PATH):
	// where to push, "" for nowhere.
	PushImage, PushChart string
	NameOptions          []name.Option
}

// Release writes a release into Out, reproducibly (the same commit and
// binaries give the same bytes): image/, the image as an OCI layout;
// NAME-VERSION.tgz, the chart pinned to the image's digest (and to
// PushImage's repository when pushed); oomguard-VERSION.spdx.json, the
// image's SBOM; SHA256SUMS of them. It pushes the image and the chart only
// when asked, saying on w what it wrote and pushed.
func Release(w io.Writer, o Options) error {
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	d, err := Publish(w, o.Bin, filepath.Join(o.Out, "image"), o.PushImage, o.Meta, o.NameOptions...)
	if err != nil {
		return err
	}
	repository := ""
	if o.PushImage != "" {
		ref, _ := name.ParseReference(o.PushImage, o.NameOptions...) // Publish pushed to it
		repository = ref.Context().Name()
	}
	chart, err := PackageChart(o.Chart, o.Meta, repository, d.String())
	if err != nil {
		return err
	}
	sbom, err := SBOM(o.Bin, d, o.Meta)
	if err != nil {
		return err
	}
	var sums strings.Builder
	for _, f := range []struct {
		name string
		data []byte
	}{{chart.FileName(), chart.Archive}, {"oomguard-" + o.Meta.Version + ".spdx.json", sbom}} {
		if err := os.WriteFile(filepath.Join(o.Out, f.name), f.data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum(f.data), f.name)
	}
	// The layout's index.json is the image index itself: its sum is d.
	fmt.Fprintf(&sums, "%s  image/index.json\n", d.Hex)
	if err := os.WriteFile(filepath.Join(o.Out, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s: the image %s (image/), the chart %s %s pinned to it, its SBOM (SPDX), SHA256SUMS\n", o.Out, d, chart.Name, chart.Version)
	if o.PushChart != "" {
		ref, cd, err := PushChart(chart, o.PushChart, o.NameOptions...)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "pushed the chart %s@%s (helm install oomguard oci://%s --version %s)\n", ref, cd, ref.Context(), chart.Version)
	}
	return nil
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
