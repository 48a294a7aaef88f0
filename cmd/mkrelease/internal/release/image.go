// Package release builds oomguard's release image, as `make image` runs it
// (cmd/mkrelease): a multi-platform OCI image index (linux/amd64, linux/arm64)
// whose images are the static oomguard-nri, oomguard-doctor, oomguard-hook
// and imagepatch (its webhook) and a root bundle (Roots) as one layer on
// nothing, with fixed times, so the same commit gives the same digest;
// written as an OCI image layout, pushed on request.
package release

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Programs are the binaries the image holds, in /usr/local/bin; the first is
// its entrypoint.
var Programs = []string{"oomguard-nri", "oomguard-doctor", "oomguard-hook", "imagepatch"}

// Arches are the platforms the index holds, all linux.
var Arches = []string{"amd64", "arm64"}

// Repository is where the image is published; Source is its code.
const (
	Repository = "ghcr.io/oomguard/oomguard"
	Source     = "https://github.com/oomguard/oomguard"
)

// Meta is what the image says about itself.
type Meta struct {
	Version, Commit string
	Created         time.Time // the commit's time: fixed for a commit
}

// Publish builds the index from bin, writes it as an OCI layout at out, and
// pushes it to push unless that is "", saying on w what it did; it returns
// the index's digest.
func Publish(w io.Writer, bin, out, push string, m Meta, opts ...name.Option) (v1.Hash, error) {
	idx, sizes, err := Build(bin, m)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(out); err != nil {
		return v1.Hash{}, err
	}
	// The index is a blob, named by the release in index.json (ref.name):
	// skopeo copy oci:DIR:RELEASE and oras copy --from-oci-layout DIR:RELEASE
	// find one image there.
	lp, err := layout.Write(out, empty.Index)
	if err == nil {
		err = lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": m.Version}))
	}
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write the OCI layout %s: %w", out, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	for _, a := range Arches {
		fmt.Fprintf(w, "linux/%s: image %d bytes, binaries %d bytes: %.3f×\n", a, sizes[a][0], sizes[a][1], float64(sizes[a][0])/float64(sizes[a][1]))
	}
	fmt.Fprintf(w, "wrote %s: %s\nin deploy/: kustomize edit set image %s=%s:%s (pinned: %s@%s, once pushed there)\n",
		out, d, Repository, Repository, m.Version, Repository, d)
	if push == "" {
		return d, nil
	}
	ref, err := name.ParseReference(push, opts...)
	if err != nil {
		return d, fmt.Errorf("the image's reference %q: %w", push, err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return d, fmt.Errorf("push the image to %s: %w", ref, err)
	}
	fmt.Fprintf(w, "pushed %s@%s\n", ref.Context(), d)
	return d, nil
}

// Build makes the index from bin/ARCH/PROGRAM, and says per arch how big its
// image is (manifest, config and compressed layer) and its binaries.
func Build(bin string, m Meta) (v1.ImageIndex, map[string][2]int64, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	sizes := map[string][2]int64{}
	for _, a := range Arches {
		img, binBytes, err := platformImage(filepath.Join(bin, a), a, m)
		if err != nil {
			return nil, nil, fmt.Errorf("linux/%s: %w", a, err)
		}
		total, err := imageBytes(img)
		if err != nil {
			return nil, nil, err
		}
		sizes[a] = [2]int64{total, binBytes}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: plainImage{img},
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a}}})
	}
	return mutate.Annotations(idx, annotations(m)).(v1.ImageIndex), sizes, nil
}

// plainImage is an image its index entry gives no artifactType (ggcr would
// give its config's media type, which skopeo 1.9 cannot copy unchanged).
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

func annotations(m Meta) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "oomguard",
		"org.opencontainers.image.description":   "oomguard-nri, oomguard-doctor, oomguard-hook and imagepatch: one runaway process takes down its pod, not the node",
		"org.opencontainers.image.source":        Source,
		"org.opencontainers.image.url":           Source,
		"org.opencontainers.image.documentation": Source + "/tree/main/docs",
		"org.opencontainers.image.vendor":        "oomguard maintainers",
		"org.opencontainers.image.version":       m.Version,
		"org.opencontainers.image.revision":      m.Commit,
		"org.opencontainers.image.created":       m.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":      "Apache-2.0",
	}
}

func platformImage(dir, arch string, m Meta) (v1.Image, int64, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, b []byte) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: m.Created, Format: tar.FormatPAX}
		if strings.HasSuffix(name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "usr/", "usr/local/", "usr/local/bin/"} {
		if err := add(d, 0o755, nil); err != nil {
			return nil, 0, err
		}
	}
	if err := add(RootsPath, 0o644, Roots()); err != nil {
		return nil, 0, err
	}
	var binBytes int64
	for _, p := range Programs {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return nil, 0, fmt.Errorf("%w (make image builds it)", err)
		}
		binBytes += int64(len(b))
		if err := add("usr/local/bin/"+p, 0o755, b); err != nil {
			return nil, 0, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, 0, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, 0, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: m.Created}, CreatedBy: "make image", Comment: "oomguard " + m.Version}})
	if err != nil {
		return nil, 0, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, 0, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: m.Created}
	// The plugin writes other processes' oom_score_adj and cgroup files: root.
	cf.Config = v1.Config{
		Entrypoint: []string{"/usr/local/bin/" + Programs[0]},
		Env:        []string{"PATH=/usr/local/bin"},
		Labels:     annotations(m),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, 0, err
	}
	img = mutate.Annotations(img, annotations(m)).(v1.Image)
	return img, binBytes, nil
}

// imageBytes is what pulling the image moves: manifest, config and layers.
func imageBytes(img v1.Image) (int64, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return 0, err
	}
	total := int64(len(raw) + len(cfg))
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
