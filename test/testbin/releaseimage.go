package testbin

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// ReleaseIndex is the release's image index in the OCI layout make image
// writes at dir: the entry index.json names (ref.name).
func ReleaseIndex(dir string) (v1.ImageIndex, error) {
	lp, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (run make image)", dir, err)
	}
	im, err := lp.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("%s: want one image index in the layout, found %d entries (run make image)", dir, len(im.Manifests))
	}
	return lp.ImageIndex(im.Manifests[0].Digest)
}

// ReleaseImage is the linux/arch image of that index.
func ReleaseImage(dir, arch string) (v1.Image, error) {
	idx, err := ReleaseIndex(dir)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s has no linux/%s image (run make image)", dir, arch)
}
