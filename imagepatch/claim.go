// What an image or index says it was made from, and whether the registry bears it out.

package imagepatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// claimOf reads the labels (an index's annotations) the image or index
// at ref records itself made with.
func (p *Patcher) claimOf(ctx context.Context, sess *session, ref name.Reference) (map[string]string, error) {
	desc, err := remote.Get(ref, sess.opts(ctx)...)
	if err != nil {
		return nil, err
	}
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		return p.indexClaim(idx, im), nil
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		return cf.Config.Labels, nil
	}
	return nil, fmt.Errorf("%s is %s", ref, desc.MediaType)
}

// indexClaim is what an index says it was made from: its annotations, or,
// for a Docker manifest list (whose schema has no annotations), the labels
// of its first entry the patch would patch, which record the index's base
// as LabelBaseIndex.
func (p *Patcher) indexClaim(idx v1.ImageIndex, im *v1.IndexManifest) map[string]string {
	if im.Annotations[LabelName] != "" || im.MediaType != types.DockerManifestList {
		return im.Annotations
	}
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() || p.spec.SupportsPlatform(d.Platform) != "" {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil
		}
		cf, err := img.ConfigFile()
		if err != nil || cf.Config.Labels[LabelName] == "" {
			return nil
		}
		l := cf.Config.Labels
		return map[string]string{LabelName: l[LabelName], LabelVersion: l[LabelVersion], LabelBaseName: l[LabelBaseName], LabelBaseDigest: l[LabelBaseIndex]}
	}
	return nil
}

// rebase weighs what the source says it is. Labels are the image's own,
// and an image built FROM a patched one inherits them, so a claim counts
// only where the registry bears it out: the recorded base, read by digest
// from the source's repository, is what check finds the source made from
// (the base and at most the patch's layer). Borne out, the same patch and
// version is skipped, and another version starts from the base (upgrade:
// check's base is patched in place of the source). Otherwise the source
// is patched as the image it is, and b.note says why.
func (p *Patcher) rebase(ctx context.Context, sess *session, b *built, labels map[string]string, src name.Reference, check func(*remote.Descriptor) error) (upgrade bool, skip string, err error) {
	if labels[LabelName] != p.spec.Name {
		return false, "", nil
	}
	version, baseName, baseDigest := labels[LabelVersion], labels[LabelBaseName], labels[LabelBaseDigest]
	unverified := func(why string) (bool, string, error) {
		b.note = fmt.Sprintf("labelled %s %s made from %q, but %s: patched as the image it is", p.spec.Name, version, baseDigest, why)
		return false, "", nil
	}
	h, err := v1.NewHash(baseDigest)
	if err != nil {
		return unverified("that is not a digest")
	}
	base := src.Context().Digest(h.String())
	bd, err := remote.Get(base, sess.opts(ctx)...)
	switch {
	case notFound(err):
		return unverified(fmt.Sprintf("%s is not in its repository", base))
	case err != nil:
		return false, "", fmt.Errorf("read %s's recorded base %s: %w", src, base, err)
	}
	if err := check(bd); err != nil {
		return unverified(fmt.Sprintf("it was not made from that: %v", err))
	}
	if version == p.spec.Version {
		return false, fmt.Sprintf("already %s %s (made from %s)", p.spec.Name, version, base), nil
	}
	b.base, b.upgraded = base.String(), true
	// Named after the recorded tag only while that tag holds the base (a
	// tag moved since, or a name that is not the base's, must not take
	// another image's destination); else after the base's digest. The
	// registry we reach the source by is kept (a mirror, or http).
	b.baseTag = DigestTag(base)
	if tag, err := name.NewTag(baseName, name.WeakValidation); err == nil {
		t := src.Context().Tag(tag.TagStr())
		got, ok, err := p.holds(ctx, sess, t)
		if err != nil {
			return false, "", fmt.Errorf("look up %s's recorded base name: %w", src, err)
		}
		if ok && got == h {
			b.baseTag = t
		}
	}
	return true, "", nil
}

// madeFrom says why src is not base with at most one layer of the patch
// named patch on it and nothing else a patch leaves alone changed: the
// platform, base's layers and history first, its command, user and
// working directory, its entrypoint at the end of src's.
func madeFrom(src, base v1.Image, patch string) error {
	sm, err := src.Manifest()
	if err != nil {
		return err
	}
	bm, err := base.Manifest()
	if err != nil {
		return err
	}
	extra := len(sm.Layers) - len(bm.Layers)
	if extra < 0 || extra > 1 {
		return fmt.Errorf("%d layers on a base of %d", len(sm.Layers), len(bm.Layers))
	}
	for i, l := range bm.Layers {
		if sm.Layers[i].Digest != l.Digest {
			return fmt.Errorf("layer %d is %s, the base's %s", i, sm.Layers[i].Digest, l.Digest)
		}
	}
	sc, err := src.ConfigFile()
	if err != nil {
		return err
	}
	bc, err := base.ConfigFile()
	if err != nil {
		return err
	}
	switch {
	case sc.OS != bc.OS || sc.Architecture != bc.Architecture || sc.Variant != bc.Variant:
		return fmt.Errorf("%s/%s, the base %s/%s", sc.OS, sc.Architecture, bc.OS, bc.Architecture)
	case len(sc.RootFS.DiffIDs) != len(bc.RootFS.DiffIDs)+extra || !slices.Equal(sc.RootFS.DiffIDs[:len(bc.RootFS.DiffIDs)], bc.RootFS.DiffIDs):
		return errors.New("its layers' contents are not the base's")
	case sc.Config.User != bc.Config.User || sc.Config.WorkingDir != bc.Config.WorkingDir:
		return errors.New("its user or working directory is not the base's")
	// A default command goes into the cmd of a base that has neither.
	case !slices.Equal(sc.Config.Cmd, bc.Config.Cmd) && (len(entrypoint(bc.Config)) > 0 || len(bc.Config.Cmd) > 0):
		return errors.New("its command is not the base's")
	case !hasSuffix(entrypoint(sc.Config), entrypoint(bc.Config)):
		return errors.New("its entrypoint does not end with the base's")
	}
	// The base's history first: as it is, or with the entries imagepatch
	// adds for layers it records none for.
	hist := bc.History
	if extra == 1 && len(sc.History) != len(hist)+1 {
		hist = padHistory(bc.History, len(bm.Layers), bc.Created)
	}
	if len(sc.History) != len(hist)+extra {
		return fmt.Errorf("%d history entries on the base's %d", len(sc.History), len(bc.History))
	}
	for i, h := range hist {
		s := sc.History[i]
		if s.CreatedBy != h.CreatedBy || s.Comment != h.Comment || s.Author != h.Author || s.EmptyLayer != h.EmptyLayer || !s.Created.Equal(h.Created.Time) {
			return fmt.Errorf("history entry %d (%q) is not the base's", i, s.CreatedBy)
		}
	}
	if extra == 1 && !strings.HasPrefix(sc.History[len(sc.History)-1].CreatedBy, "imagepatch "+patch+" ") {
		return fmt.Errorf("its last layer was made by %q, not by imagepatch %s", sc.History[len(sc.History)-1].CreatedBy, patch)
	}
	return nil
}

func hasSuffix(s, suf []string) bool {
	return len(s) >= len(suf) && slices.Equal(s[len(s)-len(suf):], suf)
}

// indexMadeFrom says why src is not base's index patched: each entry
// either one of base's as it was or an image madeFrom base's entry for
// the same platform, each of those used once.
func indexMadeFrom(src, base v1.ImageIndex, patch string) error {
	sm, err := src.IndexManifest()
	if err != nil {
		return err
	}
	bm, err := base.IndexManifest()
	if err != nil {
		return err
	}
	kept := map[v1.Hash]bool{}
	byPlatform := map[string]v1.Descriptor{}
	for _, d := range bm.Manifests {
		kept[d.Digest] = true
		if d.MediaType.IsImage() && d.Platform != nil {
			byPlatform[d.Platform.String()] = d
		}
	}
	for _, d := range sm.Manifests {
		if kept[d.Digest] {
			continue
		}
		if !d.MediaType.IsImage() || d.Platform == nil {
			return fmt.Errorf("entry %s is neither the base's nor a patched image", d.Digest)
		}
		plat := d.Platform.String()
		bd, ok := byPlatform[plat]
		if !ok {
			return fmt.Errorf("the base has no %s entry (or two entries were made from it)", plat)
		}
		delete(byPlatform, plat)
		si, err := src.Image(d.Digest)
		if err != nil {
			return err
		}
		bi, err := base.Image(bd.Digest)
		if err != nil {
			return err
		}
		if err := madeFrom(si, bi, patch); err != nil {
			return fmt.Errorf("its %s entry: %w", plat, err)
		}
	}
	return nil
}
