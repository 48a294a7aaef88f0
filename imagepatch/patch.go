package imagepatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/template"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultTagTemplate names a result after its base tag and the patch.
const DefaultTagTemplate = "{{.Tag}}-{{.Patch}}.{{.Version}}"

// Action is what happened, or would happen, to one source tag.
type Action string

const (
	ActionPush      Action = "push"      // a new tag (plan: would be pushed)
	ActionUnchanged Action = "unchanged" // the destination already holds exactly this result
	ActionSkipped   Action = "skipped"   // the source is itself this patch's result
	ActionRefused   Action = "refused"   // the destination holds other content and is left alone
	ActionFailed    Action = "failed"
)

// Result is one source tag's outcome.
type Result struct {
	Source      string   `json:"source"`
	Destination string   `json:"destination,omitempty"`
	Action      Action   `json:"action"`
	Digest      string   `json:"digest,omitempty"` // the patched image or index
	Base        string   `json:"base,omitempty"`   // what it was made from, repo@digest
	Upgraded    bool     `json:"upgraded,omitempty"`
	Dropped     []string `json:"dropped,omitempty"` // index entries left out
	Note        string   `json:"note,omitempty"`    // why what the source claims to be was not believed
	Error       string   `json:"error,omitempty"`
}

// Patcher applies one spec to images.
type Patcher struct {
	spec *Spec
	tmpl *template.Template
	ropt []remote.Option
	jobs int
	// The transport and credentials of WithRegistry, for the requests
	// the patcher makes itself; nil: it makes none.
	rt   http.RoundTripper
	keys authn.Keychain

	mu     sync.Mutex
	layers map[string]v1.Layer // by arch and media type
}

// Option configures a Patcher.
type Option func(*Patcher) error

// WithTagTemplate names destination tags; fields: .Tag .Patch .Version .Repo.
func WithTagTemplate(t string) Option {
	return func(p *Patcher) error {
		tm, err := template.New("tag").Option("missingkey=error").Parse(t)
		if err != nil {
			return fmt.Errorf("tag template %q: %w", t, err)
		}
		p.tmpl = tm
		return nil
	}
}

// WithRemoteOptions passes options (auth, transport, retries) to every registry call.
func WithRemoteOptions(o ...remote.Option) Option {
	return func(p *Patcher) error { p.ropt = append(p.ropt, o...); return nil }
}

// WithRegistry sends every registry call through rt, with credentials from
// keys (nil: anonymous): remote.WithTransport and remote.WithAuthFromKeychain
// for go-containerregistry's calls, and the same for the patcher's own,
// which upload a config in two requests (POST, then PUT with the body)
// instead of go-containerregistry's four (HEAD, POST, PATCH, PUT). Without
// it, set the transport with WithRemoteOptions and configs go up in four.
func WithRegistry(rt http.RoundTripper, keys authn.Keychain) Option {
	return func(p *Patcher) error {
		if rt == nil {
			return errors.New("WithRegistry: no transport")
		}
		p.rt, p.keys = rt, keys
		p.ropt = append(p.ropt, remote.WithTransport(rt))
		if keys != nil {
			p.ropt = append(p.ropt, remote.WithAuthFromKeychain(keys))
		}
		return nil
	}
}

// WithJobs bounds how many tags are patched at once.
func WithJobs(n int) Option {
	return func(p *Patcher) error {
		if n < 1 {
			return fmt.Errorf("jobs %d: want at least 1", n)
		}
		p.jobs = n
		return nil
	}
}

// New makes a Patcher for spec.
func New(spec *Spec, opts ...Option) (*Patcher, error) {
	p := &Patcher{spec: spec, jobs: 4, layers: map[string]v1.Layer{}}
	if err := WithTagTemplate(DefaultTagTemplate)(p); err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	if _, err := p.newSession(); err != nil {
		return nil, err
	}
	return p, nil
}

// session is one run's registry client: within it a repository is set up
// (pinged, its token fetched) once and a blob written to it once. Each run
// has its own, so one run's set-up with a slow registry holds no other
// run or lookup, and what it keeps per repository goes with the run.
type session struct {
	puller *remote.Puller
	pusher *remote.Pusher
	blobs  sync.Map // repository → *blobClient, the patcher's own uploads
}

func (p *Patcher) newSession() (*session, error) {
	puller, err := remote.NewPuller(p.ropt...)
	if err != nil {
		return nil, fmt.Errorf("registry options: %w", err)
	}
	pusher, err := remote.NewPusher(p.ropt...)
	if err != nil {
		return nil, fmt.Errorf("registry options: %w", err)
	}
	return &session{puller: puller, pusher: pusher}, nil
}

func (s *session) opts(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.Reuse(s.puller), remote.Reuse(s.pusher)}
}

// lookup is the descriptor ref names now, with a client of its own.
func (p *Patcher) lookup(ctx context.Context, ref name.Reference) (*v1.Descriptor, error) {
	return remote.Head(ref, append(slices.Clone(p.ropt), remote.WithContext(ctx))...)
}

// Spec is the patch p applies.
func (p *Patcher) Spec() *Spec { return p.spec }

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// DestinationTag renders the tag template for a base tag.
func (p *Patcher) DestinationTag(base name.Tag) (name.Tag, error) {
	var b strings.Builder
	data := map[string]string{"Tag": base.TagStr(), "Patch": p.spec.Name, "Version": p.spec.Version, "Repo": base.RepositoryStr()}
	if err := p.tmpl.Execute(&b, data); err != nil {
		return name.Tag{}, fmt.Errorf("tag template: %w", err)
	}
	if !tagRE.MatchString(b.String()) {
		return name.Tag{}, fmt.Errorf("tag template gave %q, which is not a valid tag (letters, digits, _ . -, at most 128)", b.String())
	}
	if b.String() == base.TagStr() {
		return name.Tag{}, fmt.Errorf("tag template gives the source tag %q itself: imagepatch never overwrites a source", b.String())
	}
	return base.Context().Tag(b.String()), nil
}

// Plan works out what Apply would do to src, writing nothing.
func (p *Patcher) Plan(ctx context.Context, src name.Tag) Result {
	return p.Run(ctx, []name.Tag{src}, false, nil)[0]
}

// Apply patches src and pushes the result under its destination tag.
func (p *Patcher) Apply(ctx context.Context, src name.Tag) Result {
	return p.Run(ctx, []name.Tag{src}, true, nil)[0]
}

// ApplyRef patches what read names (a tag, or a digest pinning what a tag
// named when it was looked at) as the tag as: the destination is named after
// it and the result records it as its base. For a reference by digest
// alone, as is DigestTag(read).
func (p *Patcher) ApplyRef(ctx context.Context, read name.Reference, as name.Tag) Result {
	return p.run(ctx, []source{{read, as}}, true, nil)[0]
}

// DigestTag is the tag an image known only by its digest is named by in
// destination tags: sha256-HEX.
func DigestTag(d name.Digest) name.Tag {
	return d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1))
}

// source is what to read, and the tag its result is named after.
type source struct {
	read name.Reference
	tag  name.Tag
}

// Run plans or applies every source with bounded concurrency, calling done
// after each; results keep the order of srcs. Every source is planned before
// anything is pushed: sources whose results would go to one destination are
// all refused, so that no destination is written twice.
func (p *Patcher) Run(ctx context.Context, srcs []name.Tag, apply bool, done func(Result)) []Result {
	ss := make([]source, len(srcs))
	for i, t := range srcs {
		ss[i] = source{t, t}
	}
	return p.run(ctx, ss, apply, done)
}

func (p *Patcher) run(ctx context.Context, srcs []source, apply bool, done func(Result)) []Result {
	out := make([]Result, len(srcs))
	sess, err := p.newSession()
	if err != nil {
		for i, s := range srcs {
			out[i] = Result{Source: s.read.String(), Action: ActionFailed, Error: err.Error()}
		}
		return out
	}
	builds := make([]*built, len(srcs))
	p.each(len(srcs), func(i int) {
		out[i], builds[i] = p.plan(ctx, sess, srcs[i], apply)
	})
	refuseShared(out)
	p.each(len(srcs), func(i int) {
		if apply && out[i].Action == ActionPush {
			var err error
			if out[i].Action, err = p.push(ctx, sess, builds[i].dst, builds[i]); err != nil {
				out[i].Error = err.Error()
			}
		}
		if done != nil {
			done(out[i])
		}
	})
	return out
}

// each runs f for 0..n-1, p.jobs at a time.
func (p *Patcher) each(n int, f func(i int)) {
	sem := make(chan struct{}, p.jobs)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// refuseShared refuses every result whose destination another result has.
func refuseShared(results []Result) {
	by := map[string][]int{}
	for i, r := range results {
		if r.Action == ActionPush || r.Action == ActionUnchanged || r.Action == ActionRefused {
			by[r.Destination] = append(by[r.Destination], i)
		}
	}
	for dst, idx := range by {
		if len(idx) < 2 {
			continue
		}
		var names []string
		for _, i := range idx {
			names = append(names, results[i].Source)
		}
		for _, i := range idx {
			results[i].Action = ActionRefused
			results[i].Error = fmt.Sprintf("%d sources render to %s (%s): give each its own destination with --tag-template", len(idx), dst, strings.Join(names, ", "))
		}
	}
}

// built is a patched image or index, before it is pushed.
type built struct {
	img      v1.Image
	idx      v1.ImageIndex
	digest   v1.Hash
	dropped  []string
	base     string
	baseTag  name.Tag
	upgraded bool
	dst      name.Tag
	note     string
}

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
		return res, nil
	}
	res.Digest, res.Base, res.Dropped, res.Upgraded, res.Note = b.digest.String(), b.base, b.dropped, b.upgraded, b.note
	if b.dst, err = p.DestinationTag(b.baseTag); err != nil {
		return fail(err)
	}
	res.Destination = b.dst.String()
	if apply {
		res.Action = ActionPush
		return res, b
	}
	existing, ok, err := p.holds(ctx, sess, b.dst)
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

// build makes the patched image or index for src, starting from the base
// the source records when it is, verifiably, an older version of this patch.
func (p *Patcher) build(ctx context.Context, sess *session, s source) (*built, string, error) {
	src := s.read
	desc, err := remote.Get(src, sess.opts(ctx)...)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", src, err)
	}
	b := &built{baseTag: s.tag, base: src.Context().Digest(desc.Digest.String()).String()}
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		var im *v1.IndexManifest
		if err == nil {
			im, err = idx.IndexManifest()
		}
		if err != nil {
			return nil, "", fmt.Errorf("read index %s: %w", src, err)
		}
		// The base as verified is the base patched: its entries, read
		// once for the check, are not read again.
		var baseIdx v1.ImageIndex
		upgrade, skip, err := p.rebase(ctx, sess, b, im.Annotations, src, func(bd *remote.Descriptor) error {
			if !bd.MediaType.IsIndex() {
				return fmt.Errorf("that is %s, not an index", bd.MediaType)
			}
			bi, err := bd.ImageIndex()
			if err != nil {
				return err
			}
			baseIdx = &readOnce{index: bi, images: map[v1.Hash]v1.Image{}}
			return indexMadeFrom(idx, baseIdx, p.spec.Name)
		})
		if err != nil || skip != "" {
			return nil, skip, err
		}
		if upgrade {
			idx = baseIdx
		}
		return b, "", p.patchIndex(b, idx, desc.MediaType)
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
		}
		if arch := cfg.Architecture; !p.spec.Supports(arch) {
			return nil, "", fmt.Errorf("%s is %s/%s; the patch has files for %s only", src, cfg.OS, arch, strings.Join(p.spec.Architectures(), ", "))
		}
		if b.img, err = p.patchImage(img, cfg.Architecture, b.base, b.baseTag); err != nil {
			return nil, "", err
		}
		b.digest, err = b.img.Digest()
		return b, "", err
	default:
		return nil, "", fmt.Errorf("%s is %s, not an image or an image index", src, desc.MediaType)
	}
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
	case len(sc.History) != len(bc.History)+extra:
		return fmt.Errorf("%d history entries on the base's %d", len(sc.History), len(bc.History))
	case len(sc.RootFS.DiffIDs) != len(bc.RootFS.DiffIDs)+extra || !slices.Equal(sc.RootFS.DiffIDs[:len(bc.RootFS.DiffIDs)], bc.RootFS.DiffIDs):
		return errors.New("its layers' contents are not the base's")
	case !slices.Equal(sc.Config.Cmd, bc.Config.Cmd) || sc.Config.User != bc.Config.User || sc.Config.WorkingDir != bc.Config.WorkingDir:
		return errors.New("its command, user or working directory is not the base's")
	case len(sc.Config.Entrypoint) < len(bc.Config.Entrypoint) || !slices.Equal(sc.Config.Entrypoint[len(sc.Config.Entrypoint)-len(bc.Config.Entrypoint):], bc.Config.Entrypoint):
		return errors.New("its entrypoint does not end with the base's")
	}
	for i, h := range bc.History {
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

func (p *Patcher) patchIndex(b *built, idx v1.ImageIndex, mt types.MediaType) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var adds []mutate.IndexAddendum
	for _, d := range im.Manifests {
		plat := "unknown"
		if d.Platform != nil {
			plat = d.Platform.String()
		}
		supported := d.MediaType.IsImage() && d.Platform != nil && d.Platform.OS != "unknown" && p.spec.Supports(d.Platform.Architecture)
		if !supported {
			if p.spec.Unpatchable == "keep" {
				child, err := childOf(idx, d)
				if err != nil {
					return fmt.Errorf("keep the %s entry %s: %w", plat, d.Digest, err)
				}
				adds = append(adds, mutate.IndexAddendum{Add: child, Descriptor: d})
			} else {
				b.dropped = append(b.dropped, plat+" "+d.Digest.String())
			}
			continue
		}
		child, err := idx.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("read %s entry: %w", plat, err)
		}
		base := b.baseTag.Context().Digest(d.Digest.String()).String()
		img, err := p.patchImage(child, d.Platform.Architecture, base, b.baseTag)
		if err != nil {
			return fmt.Errorf("patch %s entry: %w", plat, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform, Annotations: d.Annotations}})
	}
	if len(adds) == 0 {
		return fmt.Errorf("no entry of the index is for %s", strings.Join(p.spec.Architectures(), " or "))
	}
	out := mutate.IndexMediaType(empty.Index, mt)
	out = mutate.AppendManifests(out, adds...)
	ann := map[string]string{}
	for k, v := range im.Annotations {
		ann[k] = v
	}
	for k, v := range p.recordLabels(b.base, b.baseTag) {
		ann[k] = v
	}
	b.idx = mutate.Annotations(out, ann).(v1.ImageIndex)
	b.digest, err = b.idx.Digest()
	return err
}

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

func (p *Patcher) recordLabels(base string, baseTag name.Tag) map[string]string {
	_, digest, _ := strings.Cut(base, "@")
	return map[string]string{
		LabelName: p.spec.Name, LabelVersion: p.spec.Version,
		LabelBaseDigest: digest, LabelBaseName: baseTag.String(),
	}
}

// patchImage appends the patch layer and edits the config; the result's
// digest depends only on the base and the spec.
func (p *Patcher) patchImage(base v1.Image, arch, baseRef string, baseTag name.Tag) (v1.Image, error) {
	mt, err := base.MediaType()
	if err != nil {
		return nil, err
	}
	lmt := types.OCILayer
	if mt == types.DockerManifestSchema2 {
		lmt = types.DockerLayer
	}
	layer, err := p.layer(arch, lmt)
	if err != nil {
		return nil, err
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	img := base
	if len(p.spec.Files) > 0 {
		img, err = mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: lmt, History: v1.History{
			Created: cfg.Created, CreatedBy: "imagepatch " + p.spec.Name + " " + p.spec.Version, Comment: "oomguard imagepatch",
		}})
		if err != nil {
			return nil, err
		}
	}
	nc, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	nc = nc.DeepCopy()
	p.editConfig(&nc.Config)
	for k, v := range p.recordLabels(baseRef, baseTag) {
		nc.Config.Labels[k] = v
	}
	return mutate.ConfigFile(img, nc)
}

func (p *Patcher) editConfig(c *v1.Config) {
	e := p.spec.Config
	if pre := e.EntrypointPrefix; len(pre) > 0 && !hasPrefix(c.Entrypoint, pre) {
		ep := append(slices.Clone(pre), c.Entrypoint...)
		if len(c.Entrypoint) == 0 && len(c.Cmd) == 0 {
			ep = append(ep, e.DefaultCommand...)
		}
		c.Entrypoint = ep
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

// holds is what dst holds now: its digest, or false when it does not exist.
func (p *Patcher) holds(ctx context.Context, sess *session, dst name.Tag) (v1.Hash, bool, error) {
	d, err := remote.Head(dst, sess.opts(ctx)...)
	switch {
	case err == nil:
		return d.Digest, true, nil
	case notFound(err):
		return v1.Hash{}, false, nil
	}
	return v1.Hash{}, false, fmt.Errorf("check %s: %w", dst, err)
}

// notFound is a registry's 404: no such tag, manifest or repository.
func notFound(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound
}

// push writes the result, checking just before that the tag is free (or
// holds this very result: then it is unchanged) and just after that it
// holds this result: a registry has no conditional write, so another
// writer (a second run, a second webhook replica) may fill it meanwhile,
// and then this run says so instead of reporting success. An image needs
// only its config and manifest written, and the patch layer once per
// repository: its base layers are the source's, in the same repository.
// An index goes through remote.WriteIndex.
func (p *Patcher) push(ctx context.Context, sess *session, dst name.Tag, b *built) (Action, error) {
	switch got, ok, err := p.holds(ctx, sess, dst); {
	case err != nil:
		return ActionFailed, err
	case ok && got == b.digest:
		return ActionUnchanged, nil
	case ok:
		return ActionRefused, errors.New(taken(dst, got))
	}
	if err := p.write(ctx, sess, dst, b); err != nil {
		return ActionFailed, err
	}
	switch got, ok, err := p.holds(ctx, sess, dst); {
	case err != nil:
		return ActionFailed, fmt.Errorf("after the push: %w", err)
	case !ok || got != b.digest:
		return ActionRefused, fmt.Errorf("%s holds %s after this run pushed %s: another writer pushed it at the same time, and theirs is there", dst, got, b.digest)
	}
	return ActionPush, nil
}

func (p *Patcher) write(ctx context.Context, sess *session, dst name.Tag, b *built) error {
	if b.idx != nil {
		if err := remote.WriteIndex(dst, b.idx, sess.opts(ctx)...); err != nil {
			return fmt.Errorf("push %s: %w", dst, err)
		}
		return nil
	}
	ls, err := b.img.Layers()
	if err != nil {
		return err
	}
	// The patch layer is the same for every tag: the session's pusher
	// looks for it, and uploads it, once per repository.
	if len(p.spec.Files) > 0 {
		if err := sess.pusher.Upload(ctx, dst.Context(), ls[len(ls)-1]); err != nil {
			return fmt.Errorf("upload the patch layer to %s: %w", dst.Context(), err)
		}
	}
	cl, err := partial.ConfigLayer(b.img)
	if err != nil {
		return err
	}
	if err := p.uploadConfig(ctx, sess, dst.Context(), cl); err != nil {
		return fmt.Errorf("upload the config of %s: %w", dst, err)
	}
	// Put, not Push: the tag was just seen free.
	if err := sess.pusher.Put(ctx, dst, b.img); err != nil {
		return fmt.Errorf("push %s: %w", dst, err)
	}
	return nil
}

// uploadConfig writes a config blob to repo. A config is new with each
// result (it records the base), so it is not looked for first: it goes
// up in two requests, a POST and a PUT with the body, where
// go-containerregistry's writer makes four (HEAD, POST, PATCH, PUT);
// uploading one that is there already writes the same bytes again. If
// that fails for any reason, or the patcher has no transport of its own
// (WithRegistry), go-containerregistry's writer does it, with its retries.
func (p *Patcher) uploadConfig(ctx context.Context, sess *session, repo name.Repository, cl v1.Layer) error {
	if p.rt != nil {
		c, err := p.blobClient(ctx, sess, repo)
		if err == nil {
			err = putBlob(ctx, c, repo, cl)
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return sess.pusher.Upload(ctx, repo, cl)
}

// blobClient is a session's client for the patcher's own uploads to one
// repository: pinged, and its token fetched, once.
type blobClient struct {
	once   sync.Once
	client *http.Client
	err    error
}

func (p *Patcher) blobClient(ctx context.Context, sess *session, repo name.Repository) (*http.Client, error) {
	v, _ := sess.blobs.LoadOrStore(repo.String(), &blobClient{})
	bc := v.(*blobClient)
	bc.once.Do(func() {
		var auth authn.Authenticator = authn.Anonymous
		if p.keys != nil {
			if auth, bc.err = authn.Resolve(ctx, p.keys, repo); bc.err != nil {
				return
			}
		}
		var rt http.RoundTripper
		if rt, bc.err = transport.NewWithContext(ctx, repo.Registry, auth, p.rt, []string{repo.Scope(transport.PushScope)}); bc.err != nil {
			return
		}
		bc.client = &http.Client{Transport: rt, CheckRedirect: sameHost}
	})
	if bc.err != nil {
		sess.blobs.CompareAndDelete(repo.String(), bc) // the next caller tries again
	}
	return bc.client, bc.err
}

// sameHost refuses a redirect to another host: the fallback, whose
// writer weighs those, takes over.
func sameHost(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("redirected from %s to %s", via[0].URL.Host, req.URL.Host)
	}
	return nil
}

// putBlob uploads l to repo monolithically: POST to start an upload, PUT
// of the whole body with its digest to finish it.
func putBlob(ctx context.Context, c *http.Client, repo name.Repository, l v1.Layer) error {
	h, err := l.Digest()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	body, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return err
	}
	start := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: fmt.Sprintf("/v2/%s/blobs/uploads/", repo.RepositoryStr())}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, start.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	if err := done(resp, http.StatusAccepted); err != nil {
		return err
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("start an upload: no usable Location (%q)", resp.Header.Get("Location"))
	}
	// A path, or a URL on the registry itself; elsewhere, the fallback decides.
	u := resp.Request.URL.ResolveReference(loc)
	if u.Host != resp.Request.URL.Host || u.Scheme != resp.Request.URL.Scheme {
		return fmt.Errorf("start an upload: Location %s is not on %s", u.Redacted(), resp.Request.URL.Host)
	}
	q := u.Query()
	q.Set("digest", h.String())
	u.RawQuery = q.Encode()
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if resp, err = c.Do(req); err != nil {
		return err
	}
	return done(resp, http.StatusCreated)
}

// done checks an answer's status and closes it, its body read (at most
// 64 KiB of it) so that the connection is kept.
func done(resp *http.Response, want int) error {
	defer resp.Body.Close()
	err := transport.CheckError(resp, want)
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return err
}
