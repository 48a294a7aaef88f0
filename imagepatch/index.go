package imagepatch

import (
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// builtIndex is a patched index: the source's manifest with its patched
// entries' descriptors replaced, and nothing else changed that its format
// does not allow (mutate's index would give every entry an artifactType,
// and a Docker manifest list annotations, which its schema does not have).
type builtIndex struct {
	manifest *v1.IndexManifest
	raw      []byte
	children map[v1.Hash]mutate.Appendable
}

func newBuiltIndex(m *v1.IndexManifest, children map[v1.Hash]mutate.Appendable) (*builtIndex, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &builtIndex{manifest: m, raw: raw, children: children}, nil
}

// entryDescriptor is d, the source's descriptor of an entry, for the image
// that replaces it.
func entryDescriptor(d v1.Descriptor, img v1.Image) (v1.Descriptor, error) {
	nd, err := partial.Descriptor(img)
	if err != nil {
		return v1.Descriptor{}, err
	}
	d.Digest, d.Size, d.MediaType = nd.Digest, nd.Size, nd.MediaType
	d.Data = nil
	return d, nil
}

func (b *builtIndex) MediaType() (types.MediaType, error) { return b.manifest.MediaType, nil }
func (b *builtIndex) Digest() (v1.Hash, error)            { return partial.Digest(b) }
func (b *builtIndex) Size() (int64, error)                { return int64(len(b.raw)), nil }
func (b *builtIndex) RawManifest() ([]byte, error)        { return b.raw, nil }
func (b *builtIndex) IndexManifest() (*v1.IndexManifest, error) {
	return b.manifest.DeepCopy(), nil
}

func (b *builtIndex) Image(h v1.Hash) (v1.Image, error) {
	if img, ok := b.children[h].(v1.Image); ok {
		return img, nil
	}
	return nil, fmt.Errorf("no image %s in the index", h)
}

func (b *builtIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	if idx, ok := b.children[h].(v1.ImageIndex); ok {
		return idx, nil
	}
	return nil, fmt.Errorf("no index %s in the index", h)
}
