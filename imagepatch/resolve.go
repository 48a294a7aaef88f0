package imagepatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// State is how a Resolver answered.
type State string

const (
	StateCached    State = "cached"    // from the cache, no registry call but a tag's lookup
	StatePatched   State = "patched"   // found in the registry or pushed, within the deadline
	StatePending   State = "pending"   // still being looked up or patched when the caller's deadline came
	StateSkipped   State = "skipped"   // the source is this patch's result already
	StateThrottled State = "throttled" // not patched now: a limit on the work callers cause was reached
	StateFailed    State = "failed"
)

// Resolution is which patched image runs in place of a source.
type Resolution struct {
	Source       string `json:"source"`
	SourceDigest string `json:"sourceDigest,omitempty"` // repo@digest the source named
	Patched      string `json:"patched,omitempty"`      // repo@digest, the source's repository
	State        State  `json:"state"`
	Destination  string `json:"destination,omitempty"` // the tag the patched image is under
	Action       Action `json:"action,omitempty"`      // the patcher's, when it ran
	Limit        string `json:"limit,omitempty"`       // the limit reached, when throttled
	// Unpatched are the platforms the image runs unpatched on: entries of
	// an index the patch has no files for (windows), or, skipped, the
	// image's own.
	Unpatched []string `json:"unpatched,omitempty"`
	// NoCommand: the image has neither entrypoint nor cmd (it runs only
	// with a command given).
	NoCommand bool   `json:"noCommand,omitempty"`
	Note      string `json:"note,omitempty"` // the patcher's: labels it did not believe, a tag that moved
	Error     string `json:"error,omitempty"`
}

// The limits a Resolver's throttled answers name.
const (
	LimitConcurrent = "concurrent" // patches at once
	LimitRate       = "rate"       // patches started per minute
	LimitRepository = "repository" // patches started per minute for one source repository
	LimitLookups    = "lookups"    // tag lookups at once
)

// Limits bound the registry work callers of a Resolver can cause, and its
// memory. A patch is started only within all of them; a caller past one is
// answered at once, StateThrottled, and nothing is queued.
type Limits struct {
	Concurrent    int // patches at once
	PerMinute     int // patches started per minute, overall
	PerRepository int // patches started per minute for one source repository
	Lookups       int // tag lookups at once
	// Cached bounds each cache (tags, results, failures, per-repository
	// rates): the least recently used entry makes room.
	Cached int
}

// DefaultLimits are a Resolver's unless set.
var DefaultLimits = Limits{Concurrent: 4, PerMinute: 30, PerRepository: 5, Lookups: 32, Cached: 10000}

// Resolver answers, as admission asks it, which patched image runs in place
// of a source: from a cache keyed by the source's digest, else by the
// patcher, which finds the destination holding exactly this patch of this
// source (no registry write: a result's digest depends only on the source
// and the spec) or pushes it. A caller waits on nothing but its own
// context: tag lookups and patches run in the background, each with a
// registry client of its own and a timeout of its own, and fill the cache.
// One source is patched once at a time here; replicas elsewhere that patch
// it too push the same digest to the same tag.
type Resolver struct {
	p *Patcher
	// TagTTL is how long a tag's digest is trusted before it is looked up
	// again: a tag moved in the registry is seen at most this late.
	TagTTL time.Duration
	// FailedTTL is how long a source that failed is not tried again; each
	// failure in a row doubles it, up to MaxFailedTTL.
	FailedTTL, MaxFailedTTL time.Duration
	// PatchTimeout bounds one patch in the background, LookupTimeout one
	// tag's lookup.
	PatchTimeout, LookupTimeout time.Duration
	// Limits bound the work and memory; set them before the first Resolve.
	Limits Limits
	// Finished, when set, hears of every patch that ran, with its duration.
	Finished func(Resolution, time.Duration)

	once     sync.Once
	mu       sync.Mutex
	tags     *lru[string, pinned]     // tag → digest, when looked up
	patched  *lru[string, Resolution] // source repo@digest → its patch, or why it is left as it is
	results  *lru[string, struct{}]   // patched repo@digest: a pod already on it
	failed   *lru[string, failure]    // source repo@digest → why, until FailedTTL
	repos    *lru[string, *bucket]    // source repository → its patches' rate
	rate     bucket                   // every patch's rate
	lookups  map[string]*flight       // tag → its lookup, at most Limits.Lookups
	inflight map[string]*patchFlight  // source repo@digest → its patch, at most Limits.Concurrent
}

type failure struct {
	res Resolution
	at  time.Time
	n   int // failures in a row
}

// failedFor is how long a source that failed n times in a row is not tried again.
func (r *Resolver) failedFor(n int) time.Duration {
	d := r.FailedTTL
	for ; n > 1 && d < r.MaxFailedTTL; n-- {
		d *= 2
	}
	return min(d, max(r.MaxFailedTTL, r.FailedTTL))
}

type pinned struct {
	digest name.Digest
	at     time.Time
}

// flight is a tag's lookup in the background.
type flight struct {
	done   chan struct{}
	digest name.Digest
	err    error
}

// patchFlight is a source's patch in the background.
type patchFlight struct {
	done chan struct{}
	res  Resolution
}

// NewResolver makes a Resolver over p.
func NewResolver(p *Patcher) *Resolver {
	return &Resolver{p: p, TagTTL: time.Minute, FailedTTL: 5 * time.Minute, MaxFailedTTL: time.Hour, PatchTimeout: 10 * time.Minute, LookupTimeout: 30 * time.Second,
		Limits: DefaultLimits}
}

func (r *Resolver) init() {
	r.once.Do(func() {
		l := &r.Limits
		d := DefaultLimits
		for _, f := range []struct {
			v   *int
			def int
		}{{&l.Concurrent, d.Concurrent}, {&l.PerMinute, d.PerMinute},
			{&l.PerRepository, d.PerRepository}, {&l.Lookups, d.Lookups}, {&l.Cached, d.Cached}} {
			if *f.v <= 0 {
				*f.v = f.def
			}
		}
		r.tags, r.patched, r.results = newLRU[string, pinned](l.Cached), newLRU[string, Resolution](l.Cached), newLRU[string, struct{}](l.Cached)
		r.failed, r.repos = newLRU[string, failure](l.Cached), newLRU[string, *bucket](l.Cached)
		r.lookups, r.inflight = map[string]*flight{}, map[string]*patchFlight{}
	})
}

// Sizes is how many entries each cache and flight table holds now.
func (r *Resolver) Sizes() map[string]int {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	return map[string]int{"tags": r.tags.len(), "patched": r.patched.len(), "results": r.results.len(), "failed": r.failed.len(),
		"repositories": r.repos.len(), "lookups": len(r.lookups), "patches": len(r.inflight)}
}

// Cached answers from the cache only, with no registry call at all (a dry
// run must have no side effect).
func (r *Resolver) Cached(ref name.Reference) (Resolution, bool) {
	r.init()
	res := Resolution{Source: ref.String()}
	r.mu.Lock()
	defer r.mu.Unlock()
	key, ok := r.pinnedLocked(ref)
	if !ok {
		return res, false
	}
	done, ok := r.patched.get(key)
	if !ok {
		return res, false
	}
	return done.answer(ref), true
}

// answer is a remembered resolution, as an answer about ref.
func (res Resolution) answer(ref name.Reference) Resolution {
	res.Source, res.Action = ref.String(), ""
	if res.State == StatePatched {
		res.State = StateCached
	}
	return res
}

// pinnedLocked is the digest ref names, when known without a lookup.
func (r *Resolver) pinnedLocked(ref name.Reference) (string, bool) {
	switch ref := ref.(type) {
	case name.Digest:
		return ref.String(), true
	case name.Tag:
		p, ok := r.tags.get(ref.String())
		if !ok || time.Since(p.at) > r.TagTTL {
			return "", false
		}
		return p.digest.String(), true
	}
	return "", false
}

// Resolve says which image runs in place of ref, patching it if needed;
// at ctx's end it answers StatePending and the work goes on.
func (r *Resolver) Resolve(ctx context.Context, ref name.Reference) Resolution {
	r.init()
	res := Resolution{Source: ref.String()}
	var src name.Digest
	var as name.Tag
	switch ref := ref.(type) {
	case name.Digest:
		src, as = ref, DigestTag(ref)
	case name.Tag:
		d, state, err := r.pin(ctx, ref)
		switch {
		case state == StateThrottled:
			res.State, res.Limit = state, LimitLookups
			return res
		case err != nil:
			res.State, res.Error = state, err.Error()
			return res
		case state != "":
			res.State = state
			return res
		}
		src, as = d, ref
	default:
		res.State, res.Error = StateFailed, fmt.Sprintf("%s: neither a tag nor a digest", ref)
		return res
	}
	key := src.String()
	res.SourceDigest = key
	r.mu.Lock()
	if done, ok := r.patched.get(key); ok {
		r.mu.Unlock()
		return done.answer(ref)
	}
	if _, ok := r.results.get(key); ok {
		r.mu.Unlock()
		res.State = StateSkipped
		return res
	}
	// A failure is remembered, and not tried again for a while, longer
	// with each failure in a row.
	if f, ok := r.failed.get(key); ok && time.Since(f.at) < r.failedFor(f.n) {
		r.mu.Unlock()
		f.res.Source = res.Source
		return f.res
	}
	f, ok := r.inflight[key]
	if !ok {
		if limit := r.admitLocked(src.Context().String(), time.Now()); limit != "" {
			r.mu.Unlock()
			res.State, res.Limit = StateThrottled, limit
			return res
		}
		f = &patchFlight{done: make(chan struct{})}
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

// admitLocked starts a patch of a source in repo within the limits, or
// names the limit it would pass.
func (r *Resolver) admitLocked(repo string, now time.Time) string {
	l := r.Limits
	if len(r.inflight) >= l.Concurrent {
		return LimitConcurrent
	}
	if !r.rate.fill(now, l.PerMinute) {
		return LimitRate
	}
	b, ok := r.repos.get(repo)
	if !ok {
		b = &bucket{}
		r.repos.add(repo, b)
	}
	if !b.fill(now, l.PerRepository) {
		return LimitRepository
	}
	r.rate.take()
	b.take()
	return ""
}

// pin is the digest a tag names now: from the cache, or from a lookup in
// the background that the caller waits for until ctx ends (state pending),
// or none when too many are in flight (throttled) or it failed.
func (r *Resolver) pin(ctx context.Context, tag name.Tag) (name.Digest, State, error) {
	r.init()
	key := tag.String()
	r.mu.Lock()
	if p, ok := r.tags.get(key); ok && time.Since(p.at) <= r.TagTTL {
		r.mu.Unlock()
		return p.digest, "", nil
	}
	f, ok := r.lookups[key]
	if !ok {
		if len(r.lookups) >= r.Limits.Lookups {
			r.mu.Unlock()
			return name.Digest{}, StateThrottled, nil
		}
		f = &flight{done: make(chan struct{})}
		r.lookups[key] = f
		go r.lookup(key, tag, f)
	}
	r.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return name.Digest{}, StateFailed, f.err
		}
		return f.digest, "", nil
	case <-ctx.Done():
		return name.Digest{}, StatePending, nil
	}
}

func (r *Resolver) lookup(key string, tag name.Tag, f *flight) {
	ctx, cancel := context.WithTimeout(context.Background(), r.LookupTimeout)
	defer cancel()
	desc, err := r.p.lookup(ctx, tag)
	r.mu.Lock()
	if err != nil {
		f.err = fmt.Errorf("look up %s: %w", tag, err)
	} else {
		f.digest = tag.Context().Digest(desc.Digest.String())
		r.tags.add(key, pinned{f.digest, time.Now()})
	}
	delete(r.lookups, key)
	r.mu.Unlock()
	close(f.done)
}

func (r *Resolver) patch(key string, src name.Digest, as name.Tag, f *patchFlight) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.PatchTimeout)
	defer cancel()
	res := r.p.ApplyRef(ctx, src, as)
	out := Resolution{Source: src.String(), SourceDigest: key, Action: res.Action, Note: res.Note, Error: res.Error,
		Unpatched: res.Unpatched, NoCommand: res.NoCommand}
	switch res.Action {
	case ActionPush, ActionUnchanged:
		// The destination is in the source's repository: the pod's pull
		// secrets reach it.
		out.Patched, out.Destination, out.State = src.Context().Digest(res.Digest).String(), res.Destination, StatePatched
	case ActionSkipped:
		out.State = StateSkipped
	default:
		out.State = StateFailed
	}
	r.mu.Lock()
	switch out.State {
	case StatePatched, StateSkipped:
		// Both follow from the source's digest and the spec alone.
		r.patched.add(key, out)
		r.failed.remove(key)
		if out.Patched != "" {
			r.results.add(out.Patched, struct{}{})
		}
	case StateFailed:
		prev, _ := r.failed.get(key)
		r.failed.add(key, failure{out, time.Now(), prev.n + 1})
	}
	delete(r.inflight, key)
	r.mu.Unlock()
	f.res = out
	close(f.done)
	if r.Finished != nil {
		r.Finished(out, time.Since(start))
	}
}
