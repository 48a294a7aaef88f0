// Plan stage: what a source is, what its result becomes and where it goes.

package imagepatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// plan builds the result for src and says what pushing it would do. A
// panic while building fails this source only. Before an apply the
// destination is not looked at here: the push looks at it just before
// it writes, and a look now would only be older.
func (p *Patcher) plan(ctx context.Context, sess *session, s source, apply bool) (res Result, b *built) {
	src := s.read
	res = Result{Source: src.String()}
	fail := func(err error) (Result, *built) {
		res.Action, res.Error = ActionFailed, err.Error()
		return res, nil
	}
	defer func() {
		if r := recover(); r != nil {
			res, b = fail(fmt.Errorf("internal error patching %s: %v", src, r))
		}
	}()
	b, skip, err := p.build(ctx, sess, s)
	if err != nil {
		return fail(err)
	}
	if skip != "" {
		res.Action, res.Error = ActionSkipped, skip
		if b != nil {
			res.Unpatched = b.unpatched
		}
		return res, nil
	}
	b.fill(&res)
	if apply {
		res.Action = ActionPush
		return res, b
	}
	existing, ok, err := p.holds(ctx, sess, b.dst)
	if err == nil && ok && existing != b.digest {
		var moved bool
		if moved, err = p.moved(ctx, sess, b, existing); err == nil && moved {
			b.fill(&res)
			existing, ok, err = p.holds(ctx, sess, b.dst)
		}
	}
	switch {
	case err != nil:
		return fail(err)
	case ok && existing == b.digest:
		res.Action = ActionUnchanged
	case ok:
		res.Action, res.Error = ActionRefused, taken(b.dst, existing)
	default:
		res.Action = ActionPush
	}
	return res, b
}

func taken(dst name.Tag, holds v1.Hash) string {
	return fmt.Sprintf("%s already holds %s, not this result: left alone; choose another --tag-template or delete that tag", dst, holds)
}

// moved looks at what b's destination holds when that is not b's result.
// Another result of this patch and version, made from another base, means
// the source's tag has moved since that result was made (the normal life
// of a tag): that result stays, and b is named after its base's digest
// instead (sha256-HEX in the tag template), a name no other base's patch
// can have. The holder's labels decide only that: they can make a result
// go under its digest's name, never take another image's destination.
func (p *Patcher) moved(ctx context.Context, sess *session, b *built, held v1.Hash) (bool, error) {
	base, err := name.NewDigest(b.base, name.WeakValidation, name.Insecure)
	if err != nil {
		return false, nil
	}
	byDigest := DigestTag(b.baseTag.Context().Digest(base.DigestStr()))
	if b.baseTag.TagStr() == byDigest.TagStr() {
		return false, nil
	}
	labels, err := p.claimOf(ctx, sess, b.dst.Context().Digest(held.String()))
	if err != nil {
		return false, nil // what cannot be read is refused as another's
	}
	if labels[LabelName] != p.spec.Name || labels[LabelVersion] != p.spec.Version || labels[LabelBaseDigest] == "" || labels[LabelBaseDigest] == base.DigestStr() {
		return false, nil
	}
	old, tag := b.dst, b.baseTag
	if err := p.render(b, byDigest); err != nil {
		return false, err
	}
	b.note = strings.TrimSpace(b.note + " " + fmt.Sprintf("%s moved: %s keeps the patch of what it named before (%s); the patch of what it names now (%s) is %s",
		tag, old, labels[LabelBaseDigest], base.DigestStr(), b.dst))
	return true, nil
}

// artifact says why the manifest desc is not an image or an index of
// images — a signature, an attestation, an SBOM, a referrers index — or ""
// when it is one: by its artifactType, its config's and layers' media
// types, or, for an index, entries that are all artifacts.
func artifact(desc *remote.Descriptor) string {
	var m struct {
		ArtifactType string `json:"artifactType"`
		Config       *struct {
			MediaType types.MediaType `json:"mediaType"`
		} `json:"config"`
		Layers []struct {
			MediaType types.MediaType `json:"mediaType"`
		} `json:"layers"`
		Manifests []struct {
			ArtifactType string       `json:"artifactType"`
			Platform     *v1.Platform `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return ""
	}
	switch mt := desc.MediaType; {
	case m.ArtifactType != "":
		return "artifactType " + m.ArtifactType
	case mt.IsImage():
		if m.Config != nil && !m.Config.MediaType.IsConfig() {
			return "config " + string(m.Config.MediaType)
		}
		for _, l := range m.Layers {
			if !isLayer(l.MediaType) {
				return "layer " + string(l.MediaType)
			}
		}
	case mt.IsIndex():
		// A referrers index lists artifacts, each with its type and none
		// with a platform (an index of images may give its entries an
		// artifactType too: their config's media type).
		if len(m.Manifests) == 0 {
			return "an index with no entries"
		}
		for _, d := range m.Manifests {
			if d.ArtifactType == "" || d.Platform != nil {
				return ""
			}
		}
		return "an index of artifacts (a referrers index)"
	case !mt.IsSchema1():
		return "media type " + string(mt)
	}
	return ""
}

// isLayer is a filesystem layer's media type, OCI's or Docker's, any compression.
func isLayer(mt types.MediaType) bool {
	return mt.IsLayer() || strings.HasPrefix(string(mt), "application/vnd.oci.image.layer.") ||
		strings.HasPrefix(string(mt), "application/vnd.docker.image.rootfs.")
}

// build makes the patched image or index for src, starting from the base
// the source records when it is, verifiably, an older version of this patch.
// An artifact, a result of this patch, and an image of a platform the
// patch has no files for are skipped, with the reason.
func (p *Patcher) build(ctx context.Context, sess *session, s source) (*built, string, error) {
	src := s.read
	desc, err := remote.Get(src, sess.opts(ctx)...)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", src, err)
	}
	if why := artifact(desc); why != "" {
		return nil, fmt.Sprintf("an artifact (%s), not an image: left alone", why), nil
	}
	b := &built{base: src.Context().Digest(desc.Digest.String()).String(), mt: desc.MediaType, baseTag: s.tag}
	switch {
	case desc.MediaType.IsIndex():
		ri, err := desc.ImageIndex()
		var im *v1.IndexManifest
		if err == nil {
			im, err = ri.IndexManifest()
		}
		if err != nil {
			return nil, "", fmt.Errorf("read index %s: %w", src, err)
		}
		// Its entries are read once: for its claim, its check and its patch.
		var idx v1.ImageIndex = &readOnce{index: ri, images: map[v1.Hash]v1.Image{}}
		// The base as verified is the base patched: its entries, read
		// once for the check, are not read again.
		var baseIdx v1.ImageIndex
		var baseMT types.MediaType
		upgrade, skip, err := p.rebase(ctx, sess, b, p.indexClaim(idx, im), src, func(bd *remote.Descriptor) error {
			if !bd.MediaType.IsIndex() {
				return fmt.Errorf("that is %s, not an index", bd.MediaType)
			}
			bi, err := bd.ImageIndex()
			if err != nil {
				return err
			}
			baseIdx, baseMT = &readOnce{index: bi, images: map[v1.Hash]v1.Image{}}, bd.MediaType
			return indexMadeFrom(idx, baseIdx, p.spec.Name)
		})
		if err != nil || skip != "" {
			return nil, skip, err
		}
		if upgrade {
			idx, b.mt = baseIdx, baseMT
		}
		b.fromIdx = idx
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		var cfg *v1.ConfigFile
		if err == nil {
			cfg, err = img.ConfigFile()
		}
		if err != nil {
			return nil, "", fmt.Errorf("read image %s: %w", src, err)
		}
		// The base as verified (its config read for the check) is the
		// base patched.
		var baseImg v1.Image
		upgrade, skip, err := p.rebase(ctx, sess, b, cfg.Config.Labels, src, func(bd *remote.Descriptor) error {
			if !bd.MediaType.IsImage() {
				return fmt.Errorf("that is %s, not an image", bd.MediaType)
			}
			bi, err := bd.Image()
			if err != nil {
				return err
			}
			baseImg = bi
			return madeFrom(img, bi, p.spec.Name)
		})
		if err != nil || skip != "" {
			return nil, skip, err
		}
		if upgrade {
			img = baseImg
			if cfg, err = img.ConfigFile(); err != nil {
				return nil, "", fmt.Errorf("read %s: %w", b.base, err)
			}
		}
		if plat := platformOf(cfg); p.spec.SupportsPlatform(plat) != "" {
			b.unpatched = []string{plat.String()}
			return b, fmt.Sprintf("%s is %s: %s; left as it is", src, plat, p.spec.SupportsPlatform(plat)), nil
		}
		b.from = img
	case desc.MediaType.IsSchema1():
		return nil, "", fmt.Errorf("%s is a Docker schema 1 manifest (%s), which imagepatch cannot patch: push it again as Docker schema 2 or OCI", src, desc.MediaType)
	default:
		return nil, "", fmt.Errorf("%s is %s, not an image or an image index", src, desc.MediaType)
	}
	// Named after the source's tag, or the base's (rebase chose it).
	var none unpatchable
	if err := p.render(b, b.baseTag); errors.As(err, &none) {
		return b, fmt.Sprintf("%s: %s; left as it is", src, none), nil
	} else if err != nil {
		return nil, "", err
	}
	return b, "", nil
}

// platformOf is the platform an image's config says it is for.
func platformOf(cfg *v1.ConfigFile) *v1.Platform {
	return &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant, OSVersion: cfg.OSVersion, OSFeatures: cfg.OSFeatures}
}
