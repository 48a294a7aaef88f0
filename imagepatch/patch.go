package imagepatch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
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
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
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
	Kept        []string `json:"kept,omitempty"`    // index entries passed through unpatched, and why
	// Unpatched are the platforms (os/arch) the result runs unpatched on:
	// an index's entries the patch has no files for (another operating
	// system, another architecture), or a skipped image's own.
	Unpatched []string `json:"unpatched,omitempty"`
	// NoCommand: the image has neither entrypoint nor cmd, so it runs only
	// with a command given (as the source did); the patch gave it none.
	NoCommand bool   `json:"noCommand,omitempty"`
	Note      string `json:"note,omitempty"`      // why what the source claims to be was not believed; a tag that moved
	Signature string `json:"signature,omitempty"` // the tag holding the result's signature (WithSigner)
	Error     string `json:"error,omitempty"`
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

	signer *Signer // nil: results are not signed

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
	same := refuseShared(out)
	p.each(len(srcs), func(i int) {
		if _, ok := same[i]; !ok && apply && out[i].Action == ActionPush {
			action, err := p.push(ctx, sess, builds[i])
			builds[i].fill(&out[i])
			if out[i].Action = action; err != nil {
				out[i].Error = err.Error()
			}
			if p.signer != nil && (action == ActionPush || action == ActionUnchanged) {
				b := builds[i]
				tag, err := p.signResult(ctx, sess, b.dst.Context(), b.digest)
				if err != nil {
					out[i].Action, out[i].Error = ActionFailed, fmt.Sprintf("%s holds the result, not signed (a re-run signs it): %v", b.dst, err)
				} else {
					out[i].Signature = tag.String()
				}
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

// refuseShared refuses every result whose destination another result
// has, unless they are one result: the same source named twice, or a
// source and an earlier version's result made from it (an upgrade gives
// the source's own result). Of those, the first that is not an upgrade
// goes on; each other is skipped, saying whose result it is. It returns
// the skipped ones.
func refuseShared(results []Result) map[int]struct{} {
	by := map[string][]int{}
	for i, r := range results {
		if r.Action == ActionPush || r.Action == ActionUnchanged || r.Action == ActionRefused {
			by[r.Destination] = append(by[r.Destination], i)
		}
	}
	skipped := map[int]struct{}{}
	for dst, idx := range by {
		if len(idx) < 2 {
			continue
		}
		if one := slices.IndexFunc(idx, func(i int) bool { return results[i].Digest != results[idx[0]].Digest }); one < 0 {
			first := idx[0]
			if k := slices.IndexFunc(idx, func(i int) bool { return !results[i].Upgraded }); k >= 0 {
				first = idx[k]
			}
			for _, i := range idx {
				if i == first {
					continue
				}
				why := fmt.Sprintf("the same image as %s: its patch is %s", results[first].Source, dst)
				if results[i].Upgraded {
					why = fmt.Sprintf("an earlier result made from %s: its upgrade is %s's patch, %s", results[i].Base, results[first].Source, dst)
				}
				results[i].Action, results[i].Error = ActionSkipped, why
				skipped[i] = struct{}{}
			}
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
	return skipped
}

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
	baseTag   name.Tag
	img       v1.Image
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
		if b.img, b.noCommand, err = p.patchImage(b.from, cfg.Architecture, b.base, b.baseTag, ""); err != nil {
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
		base := b.baseTag.Context().Digest(d.Digest.String()).String()
		img, none, err := p.patchImage(child, d.Platform.Architecture, base, b.baseTag, b.base)
		if err != nil {
			return fmt.Errorf("patch %s entry: %w", plat, err)
		}
		noCommand = noCommand && none
		nd, err := entryDescriptor(d, img)
		if err != nil {
			return fmt.Errorf("patch %s entry: %w", plat, err)
		}
		out.Manifests, children[nd.Digest] = append(out.Manifests, nd), img
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
// says whether the image has neither entrypoint nor cmd.
func (p *Patcher) patchImage(base v1.Image, arch, baseRef string, baseTag name.Tag, baseIndex string) (v1.Image, bool, error) {
	mt, err := base.MediaType()
	if err != nil {
		return nil, false, err
	}
	lmt := types.OCILayer
	if mt == types.DockerManifestSchema2 {
		lmt = types.DockerLayer
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, false, fmt.Errorf("read config: %w", err)
	}
	layer, err := p.layer(arch, lmt)
	if err != nil {
		return nil, false, err
	}
	img := base
	if len(p.spec.Files) > 0 {
		img, err = mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: lmt, History: v1.History{
			Created: cfg.Created, CreatedBy: "imagepatch " + p.spec.Name + " " + p.spec.Version, Comment: "oomguard imagepatch",
		}})
		if err != nil {
			return nil, false, err
		}
	}
	nc, err := img.ConfigFile()
	if err != nil {
		return nil, false, err
	}
	nc = nc.DeepCopy()
	if len(p.spec.Files) > 0 {
		// One history entry for each layer: the base's without history
		// get theirs, before the patch layer's.
		bm, err := base.Manifest()
		if err != nil {
			return nil, false, err
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
		return nil, false, err
	}
	if mt == types.OCIManifestSchema1 {
		img = mutate.Annotations(img, lineage(baseRef, baseTag)).(v1.Image)
	}
	return img, noCommand, nil
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
func (p *Patcher) push(ctx context.Context, sess *session, b *built) (Action, error) {
	got, ok, err := p.holds(ctx, sess, b.dst)
	if err == nil && ok && got != b.digest {
		// Another result of this patch there: the source's tag moved,
		// and b goes under its base's digest's name instead.
		var moved bool
		if moved, err = p.moved(ctx, sess, b, got); err == nil && moved {
			got, ok, err = p.holds(ctx, sess, b.dst)
		}
	}
	switch {
	case err != nil:
		return ActionFailed, err
	case ok && got == b.digest:
		return ActionUnchanged, nil
	case ok:
		return ActionRefused, errors.New(taken(b.dst, got))
	}
	dst := b.dst
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
		// WriteIndex looks for each blob and manifest first: again is cheap.
		if err := settle(ctx, func() error { return remote.WriteIndex(dst, b.idx, sess.opts(ctx)...) }); err != nil {
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
	if err := settle(ctx, func() error { return sess.pusher.Put(ctx, dst, b.img) }); err != nil {
		return fmt.Errorf("push %s: %w", dst, err)
	}
	return nil
}

// settleWaits are the pauses before each new try of a manifest write that
// a registry refused for a blob it could not read (0.75 s in all).
var settleWaits = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}

// settle runs a manifest write, and runs it again while the registry
// refuses it for a blob that this run has just uploaded: a registry that
// rewrites a blob's link in place (distribution 2.x's filesystem driver
// truncates it, then writes) says a blob is unknown, or its digest
// invalid, while another writer (a second webhook replica patching the
// same source) uploads the same blob.
func settle(ctx context.Context, write func() error) error {
	err := write()
	for _, wait := range settleWaits {
		if err == nil || !blobUnread(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		err = write()
	}
	return err
}

// blobUnread says a registry refused a manifest only for the blobs or
// manifests it references: every code it gave is one of those.
func blobUnread(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return false
	}
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestBlobUnknownErrorCode, transport.BlobUnknownErrorCode, transport.DigestInvalidErrorCode:
		default:
			return false
		}
	}
	return true
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
