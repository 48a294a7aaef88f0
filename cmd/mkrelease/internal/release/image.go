// Package release builds oomguard's release image, as `make image` runs it
// (cmd/mkrelease): a multi-platform OCI image index (linux/amd64, linux/arm64)
// whose images are the static oomguard-nri, oomguard-doctor, oomguard-hook
// and imagepatch (its webhook) as one layer on nothing, with fixed times, so the same commit
// gives the same digest; written as an OCI image layout, pushed on request.
package release

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// Repository is where the image is published, and its source.
const Repository = "ghcr.io/oomguard/oomguard"

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
	if _, err := layout.Write(out, idx); err != nil {
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
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a}}})
	}
	return mutate.Annotations(idx, annotations(m)).(v1.ImageIndex), sizes, nil
}

func annotations(m Meta) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "oomguard",
		"org.opencontainers.image.source":   "https://" + Repository,
		"org.opencontainers.image.version":  m.Version,
		"org.opencontainers.image.revision": m.Commit,
		"org.opencontainers.image.created":  m.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

func platformImage(dir, arch string, m Meta) (v1.Image, int64, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var binBytes int64
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: m.Created, Format: tar.FormatPAX}); err != nil {
			return nil, 0, err
		}
	}
	for _, p := range Programs {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return nil, 0, fmt.Errorf("%w (make image builds it)", err)
		}
		binBytes += int64(len(b))
		h := &tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/" + p, Mode: 0o755, Size: int64(len(b)), ModTime: m.Created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, 0, err
		}
		if _, err := tw.Write(b); err != nil {
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
