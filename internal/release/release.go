package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
	idx, _, err := Build(o.Bin, o.Meta)
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	if _, err := layout.Write(filepath.Join(o.Out, "image"), idx); err != nil {
		return fmt.Errorf("write the image's OCI layout: %w", err)
	}
	repository := ""
	var imageRef name.Reference
	if o.PushImage != "" {
		if imageRef, err = name.ParseReference(o.PushImage, o.NameOptions...); err != nil {
			return fmt.Errorf("the image's reference %q: %w", o.PushImage, err)
		}
		repository = imageRef.Context().Name()
	}
	chart, err := PackageChart(o.Chart, o.Meta, repository, d.String())
	if err != nil {
		return err
	}
	sbom, err := SBOM(o.Bin, d, o.Meta)
	if err != nil {
		return err
	}
	files := map[string][]byte{chart.FileName(): chart.Archive, "oomguard-" + o.Meta.Version + ".spdx.json": sbom}
	index, err := os.ReadFile(filepath.Join(o.Out, "image", "index.json"))
	if err != nil {
		return err
	}
	var sums strings.Builder
	for _, f := range []string{chart.FileName(), "oomguard-" + o.Meta.Version + ".spdx.json"} {
		if err := os.WriteFile(filepath.Join(o.Out, f), files[f], 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum(files[f]), f)
	}
	fmt.Fprintf(&sums, "%s  image/index.json\n", sum(index))
	if err := os.WriteFile(filepath.Join(o.Out, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s: the image %s (image/), the chart %s %s pinned to it, its SBOM (SPDX), SHA256SUMS\n", o.Out, d, chart.Name, chart.Version)
	if imageRef != nil {
		if err := remote.WriteIndex(imageRef, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push the image to %s: %w", imageRef, err)
		}
		fmt.Fprintf(w, "pushed the image %s@%s\n", imageRef.Context(), d)
	}
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
