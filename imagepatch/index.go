// Indexes: a source index read once, a patched one assembled.

package imagepatch

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func (p *Patcher) patchIndex(b *built, idx v1.ImageIndex, mt types.MediaType) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	out := &v1.IndexManifest{SchemaVersion: im.SchemaVersion, MediaType: mt, ArtifactType: im.ArtifactType}
	children := map[v1.Hash]mutate.Appendable{}
	var platforms []string // every image entry's, for an index with none to patch
	noCommand := true
	for _, d := range im.Manifests {
		plat := "unknown"
		if d.Platform != nil {
			plat = d.Platform.String()
		}
		runnable := d.MediaType.IsImage() && d.Platform != nil && d.Platform.OS != "unknown" && d.Platform.OS != ""
		if runnable {
			platforms = append(platforms, plat)
		}
		why := p.spec.SupportsPlatform(d.Platform)
		if !d.MediaType.IsImage() {
			why = "not an image (" + string(d.MediaType) + ")"
		}
		if why != "" {
			// Another operating system's entry (windows), or one with
			// os.features, is always passed through: its nodes must still
			// find their image.
			if p.spec.Unpatchable == "keep" || (runnable && (d.Platform.OS != "linux" || len(d.Platform.OSFeatures) > 0)) {
				child, err := childOf(idx, d)
				if err != nil {
					return fmt.Errorf("keep the %s entry %s: %w", plat, d.Digest, err)
				}
				out.Manifests, children[d.Digest] = append(out.Manifests, d), child
				b.kept = append(b.kept, fmt.Sprintf("%s %s: %s", plat, d.Digest, why))
				if runnable {
					b.unpatched = append(b.unpatched, plat)
				}
			} else {
				b.dropped = append(b.dropped, plat+" "+d.Digest.String())
			}
			continue
		}
		child, err := idx.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("read %s entry: %w", plat, err)
		}
		src := b.baseTag.Context().Digest(d.Digest.String())
		img, layer, none, err := p.patchImage(child, d.Platform.Architecture, src.String(), b.baseTag, b.base)
		if err != nil {
			return fmt.Errorf("patch %s entry: %w", plat, err)
		}
		noCommand = noCommand && none
		nd, err := entryDescriptor(d, img)
		if err != nil {
			return fmt.Errorf("patch %s entry: %w", plat, err)
		}
		out.Manifests, children[nd.Digest] = append(out.Manifests, nd), &listed{Image: img, patch: layer, source: src}
	}
	if len(out.Manifests) == len(b.kept) {
		b.unpatched = platforms
		return unpatchable(fmt.Sprintf("no entry of the index is for linux on %s (it has %s)", strings.Join(p.spec.Architectures(), " or "), cmp.Or(strings.Join(platforms, ", "), "no platform's")))
	}
	b.noCommand = noCommand
	// A Docker manifest list's schema has no annotations: its entries'
	// labels say what it was made from (LabelBaseIndex).
	if mt != types.DockerManifestList {
		out.Annotations = maps.Clone(im.Annotations)
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		maps.Copy(out.Annotations, p.recordLabels(b.base, b.baseTag))
		maps.Copy(out.Annotations, lineage(b.base, b.baseTag))
	}
	if b.idx, err = newBuiltIndex(out, children); err != nil {
		return err
	}
	b.digest, err = b.idx.Digest()
	return err
}

// unpatchable is an index with no entry the patch has files for: it is
// left as it is.
type unpatchable string

func (u unpatchable) Error() string { return string(u) }

// childOf fetches an index entry as what it is, an index or an image.
func childOf(idx v1.ImageIndex, d v1.Descriptor) (mutate.Appendable, error) {
	var child mutate.Appendable
	var err error
	if d.MediaType.IsIndex() {
		child, err = idx.ImageIndex(d.Digest)
	} else {
		child, err = idx.Image(d.Digest)
	}
	if err != nil {
		return nil, err
	}
	// Fetch it now: an entry that cannot be read must fail here, not later.
	if _, err := partial.Descriptor(child); err != nil {
		return nil, err
	}
	return child, nil
}

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

// listed is a patched image whose layers are listed from its manifest, for
// remote.WriteIndex: mutate's image finds each layer by marshalling its
// whole config again, and a remote layer its media type and size by
// parsing its image's manifest again, costs that grow with the square of
// the layer count (10,000 layers: minutes). Its base layers are the
// source's, in the repository it is pushed to: a writer looks for them,
// and reads one only where the registry lacks it.
type listed struct {
	v1.Image
	patch  v1.Layer    // the patch layer, the manifest's last; nil without files
	source name.Digest // the image patched, whose repository holds the base layers
}

func (l *listed) Layers() ([]v1.Layer, error) {
	m, err := l.Image.Manifest()
	if err != nil {
		return nil, err
	}
	ls := make([]v1.Layer, len(m.Layers))
	for i, d := range m.Layers {
		if l.patch != nil && i == len(m.Layers)-1 {
			ls[i] = l.patch
			continue
		}
		// Mountable from the source, as the source's own layers are.
		ls[i] = &remote.MountableLayer{Layer: &describedLayer{desc: d, img: l.Image}, Reference: l.source}
	}
	return ls, nil
}

// describedLayer is a layer as a manifest describes it; its content is
// read through the image only when asked for.
type describedLayer struct {
	desc v1.Descriptor
	img  v1.Image
}

func (l *describedLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *describedLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *describedLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }
func (l *describedLayer) Descriptor() (*v1.Descriptor, error) { d := l.desc; return &d, nil }

func (l *describedLayer) DiffID() (v1.Hash, error) {
	c, err := l.img.LayerByDigest(l.desc.Digest)
	if err != nil {
		return v1.Hash{}, err
	}
	return c.DiffID()
}

func (l *describedLayer) Compressed() (io.ReadCloser, error) {
	c, err := l.img.LayerByDigest(l.desc.Digest)
	if err != nil {
		return nil, err
	}
	return c.Compressed()
}

func (l *describedLayer) Uncompressed() (io.ReadCloser, error) {
	c, err := l.img.LayerByDigest(l.desc.Digest)
	if err != nil {
		return nil, err
	}
	return c.Uncompressed()
}

// readOnce is an index whose images are fetched once: a remote index
// fetches an entry each time it is asked for it.
type readOnce struct {
	index
	mu     sync.Mutex
	images map[v1.Hash]v1.Image
}

type index = v1.ImageIndex

func (r *readOnce) Image(h v1.Hash) (v1.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if img, ok := r.images[h]; ok {
		return img, nil
	}
	img, err := r.index.Image(h)
	if err == nil {
		r.images[h] = img
	}
	return img, err
}
