package imagepatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// State is how a Resolver answered.
type State string

const (
	StateCached  State = "cached"  // from the cache, no registry call but a tag's lookup
	StatePatched State = "patched" // found in the registry or pushed, within the deadline
	StatePending State = "pending" // still being patched when the caller's deadline came
	StateSkipped State = "skipped" // the source is this patch's result already
	StateFailed  State = "failed"
)

// Resolution is which patched image runs in place of a source.
type Resolution struct {
	Source       string `json:"source"`
	SourceDigest string `json:"sourceDigest,omitempty"` // repo@digest the source named
	Patched      string `json:"patched,omitempty"`      // repo@digest, the source's repository
	State        State  `json:"state"`
	Action       Action `json:"action,omitempty"` // the patcher's, when it ran
	Error        string `json:"error,omitempty"`
}

// Resolver answers, as admission asks it, which patched image runs in place
// of a source: from a cache keyed by the source's digest, else by the
// patcher, which finds the destination holding exactly this patch of this
// source (no registry write: a result's digest depends only on the source
// and the spec) or pushes it. A caller waits until its context ends; the
// patch goes on in the background and fills the cache. One source is
// patched once at a time here; replicas elsewhere that patch it too push the
// same digest to the same tag.
type Resolver struct {
	p *Patcher
	// TagTTL is how long a tag's digest is trusted before it is looked up
	// again: a tag moved in the registry is seen at most this late.
	TagTTL time.Duration
	// FailedTTL is how long a source that failed is not tried again.
	FailedTTL time.Duration
	// PatchTimeout bounds one patch in the background.
	PatchTimeout time.Duration
	// Finished, when set, hears of every patch that ran, with its duration.
	Finished func(Resolution, time.Duration)

	mu       sync.Mutex
	tags     map[string]pinned  // tag → digest, when looked up
	patched  map[string]string  // source repo@digest → patched repo@digest
	failed   map[string]failure // source repo@digest → why, until FailedTTL
	inflight map[string]*flight
}

type failure struct {
	res Resolution
	at  time.Time
}

type pinned struct {
	digest name.Digest
	at     time.Time
}

type flight struct {
	done chan struct{}
	res  Resolution
}

// maxCached bounds each of the Resolver's maps: a cluster names many
// images, and a full map is emptied rather than grown.
const maxCached = 10000

// NewResolver makes a Resolver over p.
func NewResolver(p *Patcher) *Resolver {
	return &Resolver{p: p, TagTTL: time.Minute, FailedTTL: 5 * time.Minute, PatchTimeout: 10 * time.Minute,
		tags: map[string]pinned{}, patched: map[string]string{}, failed: map[string]failure{}, inflight: map[string]*flight{}}
}

// Cached answers from the cache only, with no registry call at all when
// the source is pinned by digest (a dry run must have no side effect).
func (r *Resolver) Cached(ref name.Reference) (Resolution, bool) {
	res := Resolution{Source: ref.String()}
	var key string
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ref := ref.(type) {
	case name.Digest:
		key = ref.String()
	case name.Tag:
		p, ok := r.tags[ref.String()]
		if !ok || time.Since(p.at) > r.TagTTL {
			return res, false
		}
		key = p.digest.String()
	}
	d, ok := r.patched[key]
	res.SourceDigest, res.Patched, res.State = key, d, StateCached
	return res, ok
}

// Resolve says which image runs in place of ref, patching it if needed;
// past ctx's deadline it answers StatePending and the patch goes on.
func (r *Resolver) Resolve(ctx context.Context, ref name.Reference) Resolution {
	res := Resolution{Source: ref.String()}
	src, as, err := r.pin(ctx, ref)
	if err != nil {
		res.State, res.Error = StateFailed, err.Error()
		return res
	}
	key := src.String()
	res.SourceDigest = key
	r.mu.Lock()
	if d, ok := r.patched[key]; ok {
		r.mu.Unlock()
		res.Patched, res.State = d, StateCached
		return res
	}
	if f, ok := r.failed[key]; ok && time.Since(f.at) < r.FailedTTL {
		r.mu.Unlock()
		f.res.Source = res.Source
		return f.res
	}
	f, ok := r.inflight[key]
	if !ok {
		f = &flight{done: make(chan struct{})}
		r.inflight[key] = f
		go r.patch(key, src, as, f)
	}
	r.mu.Unlock()
	select {
	case <-f.done:
		out := f.res
		out.Source = res.Source
		return out
	case <-ctx.Done():
		res.State = StatePending
		return res
	}
}

// pin is the digest ref names now and the tag its result is named after.
func (r *Resolver) pin(ctx context.Context, ref name.Reference) (name.Digest, name.Tag, error) {
	switch ref := ref.(type) {
	case name.Digest:
		return ref, DigestTag(ref), nil
	case name.Tag:
		r.mu.Lock()
		p, ok := r.tags[ref.String()]
		r.mu.Unlock()
		if ok && time.Since(p.at) <= r.TagTTL {
			return p.digest, ref, nil
		}
		desc, err := remote.Head(ref, r.p.opts(ctx)...)
		if err != nil {
			return name.Digest{}, ref, fmt.Errorf("look up %s: %w", ref, err)
		}
		d := ref.Context().Digest(desc.Digest.String())
		r.mu.Lock()
		if len(r.tags) >= maxCached {
			clear(r.tags)
		}
		r.tags[ref.String()] = pinned{d, time.Now()}
		r.mu.Unlock()
		return d, ref, nil
	}
	return name.Digest{}, name.Tag{}, fmt.Errorf("%s: neither a tag nor a digest", ref)
}

func (r *Resolver) patch(key string, src name.Digest, as name.Tag, f *flight) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.PatchTimeout)
	defer cancel()
	res := r.p.ApplyRef(ctx, src, as)
	out := Resolution{Source: src.String(), SourceDigest: key, Action: res.Action, Error: res.Error}
	switch res.Action {
	case ActionPush, ActionUnchanged:
		// The destination is in the source's repository: the pod's pull
		// secrets reach it.
		out.Patched, out.State = src.Context().Digest(res.Digest).String(), StatePatched
	case ActionSkipped:
		out.State = StateSkipped
	default:
		out.State = StateFailed
	}
	r.mu.Lock()
	switch out.State {
	case StatePatched:
		if len(r.patched) >= maxCached {
			clear(r.patched)
		}
		r.patched[key] = out.Patched
	case StateFailed, StateSkipped:
		if len(r.failed) >= maxCached {
			clear(r.failed)
		}
		r.failed[key] = failure{out, time.Now()}
	}
	delete(r.inflight, key)
	r.mu.Unlock()
	f.res = out
	close(f.done)
	if r.Finished != nil {
		r.Finished(out, time.Since(start))
	}
}
