// Build stage: the patched image, its layer and config.

package imagepatch

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// built is a patched image or index, before it is pushed.
type built struct {
	// What is patched: the source, or the base it records (an upgrade).
	from     v1.Image
	fromIdx  v1.ImageIndex
	mt       types.MediaType
	base     string // repo@digest of what is patched
	upgraded bool
	note     string
	// The result, as render made it for baseTag.
	baseTag name.Tag
	img     v1.Image
	// The image's patch layer, as patchImage appended it; nil without
	// files. The push takes it from here: b.img.Layers() would find each
	// layer by marshalling the whole config again (mutate's image), a
	// cost that grows with the square of the layer count.
	layer     v1.Layer
	idx       v1.ImageIndex
	digest    v1.Hash
	dropped   []string
	kept      []string
	unpatched []string
	noCommand bool
	dst       name.Tag
}

// fill copies what b says into res.
func (b *built) fill(res *Result) {
	res.Digest, res.Base, res.Dropped, res.Kept, res.Upgraded, res.Note = b.digest.String(), b.base, b.dropped, b.kept, b.upgraded, b.note
	res.Unpatched, res.NoCommand, res.Destination = b.unpatched, b.noCommand, b.dst.String()
}

// render makes b's result as named after baseTag (the tag its labels
// record, and its destination's).
func (p *Patcher) render(b *built, baseTag name.Tag) error {
	b.baseTag, b.dropped, b.kept, b.unpatched, b.noCommand = baseTag, nil, nil, nil, false
	var err error
	if b.fromIdx != nil {
		err = p.patchIndex(b, b.fromIdx, b.mt)
	} else {
		var cfg *v1.ConfigFile
		if cfg, err = b.from.ConfigFile(); err != nil {
			return err
		}
		if b.img, b.layer, b.noCommand, err = p.patchImage(b.from, cfg.Architecture, b.base, b.baseTag, ""); err != nil {
			return err
		}
		b.digest, err = b.img.Digest()
	}
	if err != nil {
		return err
	}
	b.dst, err = p.DestinationTag(baseTag)
	return err
}

// padHistory is an image's history with an entry for each layer it
// records none for (an image built without history, or with too little),
// so that a layer added after it has its entry at the right place: the
// history entries that are not empty_layer are one for each layer, in
// order.
func padHistory(h []v1.History, layers int, created v1.Time) []v1.History {
	n := 0
	for _, e := range h {
		if !e.EmptyLayer {
			n++
		}
	}
	if n >= layers {
		return h
	}
	pad := make([]v1.History, layers-n, layers-n+len(h)+1)
	for i := range pad {
		pad[i] = v1.History{Created: created, Comment: "imagepatch: the base image records no history for this layer"}
	}
	return append(pad, h...)
}

// entrypoint is c's entrypoint, none for [""] (which runtimes read as none).
func entrypoint(c v1.Config) []string {
	if len(c.Entrypoint) == 1 && c.Entrypoint[0] == "" {
		return nil
	}
	return c.Entrypoint
}

func (p *Patcher) recordLabels(base string, baseTag name.Tag) map[string]string {
	_, digest, _ := strings.Cut(base, "@")
	return map[string]string{
		LabelName: p.spec.Name, LabelVersion: p.spec.Version,
		LabelBaseDigest: digest, LabelBaseName: baseTag.String(),
	}
}

// patchImage appends the patch layer and edits the config; the result's
// digest depends only on the base and the spec. baseIndex is the index
// the image is an entry of (repo@digest), "" for an image alone. It also
// gives the layer it appended (nil: the spec has no files) and says
// whether the image has neither entrypoint nor cmd.
func (p *Patcher) patchImage(base v1.Image, arch, baseRef string, baseTag name.Tag, baseIndex string) (v1.Image, v1.Layer, bool, error) {
	mt, err := base.MediaType()
	if err != nil {
		return nil, nil, false, err
	}
	lmt := types.OCILayer
	if mt == types.DockerManifestSchema2 {
		lmt = types.DockerLayer
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, nil, false, fmt.Errorf("read config: %w", err)
	}
	layer, err := p.layer(arch, lmt)
	if err != nil {
		return nil, nil, false, err
	}
	img := base
	if len(p.spec.Files) == 0 {
		layer = nil
	} else {
		img, err = mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: lmt, History: v1.History{
			Created: cfg.Created, CreatedBy: "imagepatch " + p.spec.Name + " " + p.spec.Version, Comment: "oomguard imagepatch",
		}})
		if err != nil {
			return nil, nil, false, err
		}
	}
	nc, err := img.ConfigFile()
	if err != nil {
		return nil, nil, false, err
	}
	nc = nc.DeepCopy()
	if len(p.spec.Files) > 0 {
		// One history entry for each layer: the base's without history
		// get theirs, before the patch layer's.
		bm, err := base.Manifest()
		if err != nil {
			return nil, nil, false, err
		}
		nc.History = append(padHistory(nc.History[:len(nc.History)-1], len(bm.Layers), cfg.Created), nc.History[len(nc.History)-1])
	}
	noEntrypoint := len(entrypoint(nc.Config)) == 0
	p.editConfig(&nc.Config)
	noCommand := noEntrypoint && len(nc.Config.Cmd) == 0 // a spec's default_command is a command
	for k, v := range p.recordLabels(baseRef, baseTag) {
		nc.Config.Labels[k] = v
	}
	if _, digest, ok := strings.Cut(baseIndex, "@"); ok {
		nc.Config.Labels[LabelBaseIndex] = digest
	}
	if img, err = mutate.ConfigFile(img, nc); err != nil {
		return nil, nil, false, err
	}
	if mt == types.OCIManifestSchema1 {
		img = mutate.Annotations(img, lineage(baseRef, baseTag)).(v1.Image)
	}
	return img, layer, noCommand, nil
}

// lineage is the OCI annotations naming what a result was made from: by
// its tag, or by digest where the result is named after the digest (a
// tag sha256-HEX may hold the base's referrers, not the base).
func lineage(base string, baseTag name.Tag) map[string]string {
	_, digest, _ := strings.Cut(base, "@")
	baseName := baseTag.String()
	if strings.HasPrefix(baseTag.TagStr(), "sha256-") {
		baseName = baseTag.Context().String() + "@" + digest
	}
	return map[string]string{AnnotationBaseDigest: digest, AnnotationBaseName: baseName}
}

// editConfig puts the patch's entrypoint prefix in front of the image's
// entrypoint, so that every way of running the image runs it as the source
// did, behind the prefix: its cmd stays its cmd, a command given at run
// time (podman run IMAGE cmd…, Kubernetes args:) still replaces the cmd
// alone, and one that replaces the entrypoint (Kubernetes command:,
// --entrypoint) replaces the prefix too (the webhook puts it back). An
// image whose own command podman would run in systemd mode gets the init
// prefix, the shim under a name podman takes for systemd.
func (p *Patcher) editConfig(c *v1.Config) {
	e := p.spec.Config
	if pre := e.EntrypointPrefix; len(pre) > 0 && !hasPrefix(c.Entrypoint, pre) && (len(e.InitEntrypointPrefix) == 0 || !hasPrefix(c.Entrypoint, e.InitEntrypointPrefix)) {
		ep := entrypoint(*c)
		if len(ep) == 0 && len(c.Cmd) == 0 && len(e.DefaultCommand) > 0 {
			c.Cmd = slices.Clone(e.DefaultCommand)
		}
		if len(e.InitEntrypointPrefix) > 0 && PodmanSystemd(slices.Concat(ep, c.Cmd)) {
			pre = e.InitEntrypointPrefix
		}
		c.Entrypoint = slices.Concat(pre, ep)
	}
	// In key order: the result's digest must not depend on Go's map order.
	for _, k := range slices.Sorted(maps.Keys(e.Env)) {
		c.Env = slices.DeleteFunc(c.Env, func(s string) bool { return strings.HasPrefix(s, k+"=") })
		c.Env = append(c.Env, k+"="+e.Env[k])
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	for k, v := range e.Labels {
		c.Labels[k] = v
	}
}

func hasPrefix(s, pre []string) bool { return len(s) >= len(pre) && slices.Equal(s[:len(pre)], pre) }

func (p *Patcher) layer(arch string, mt types.MediaType) (v1.Layer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := arch + "|" + string(mt)
	if l, ok := p.layers[key]; ok {
		return l, nil
	}
	l, err := p.spec.Layer(arch, mt)
	if err != nil {
		return nil, err
	}
	p.layers[key] = l
	return l, nil
}
