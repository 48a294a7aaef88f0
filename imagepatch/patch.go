package imagepatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/template"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
	Signature string `json:"signature,omitempty"` // where the result's signature is (WithSigner): its tag, or its referrer's digest
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
	format SignatureFormat

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
// which upload a config in one request (a single POST, where the registry
// takes it) or two (POST, then PUT with the body) instead of
// go-containerregistry's four (HEAD, POST, PATCH, PUT). Without it, set
// the transport with WithRemoteOptions and configs go up in four.
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
				var sig name.Reference
				var err error
				if p.format == FormatBundle {
					sig, err = p.bundleResult(ctx, sess, b.dst.Context(), b.digest)
				} else {
					sig, err = p.signResult(ctx, sess, b.dst.Context(), b.digest)
				}
				if err != nil {
					out[i].Action, out[i].Error = ActionFailed, fmt.Sprintf("%s holds the result, not signed (a re-run signs it): %v", b.dst, err)
				} else {
					out[i].Signature = sig.String()
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
