package imagepatch

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// stallRegistry is an in-memory registry that, once told, holds the
// requests a stall names until released: the version check (/v2/), the
// token server's answer (with bearer auth on), or manifests.
type stallRegistry struct {
	host    string
	stall   atomic.Value // string: "", "ping", "token", "manifest"
	auth    atomic.Bool
	release chan struct{}
	once    sync.Once
	reqs    atomic.Int64 // manifest requests that reached the registry
}

func newStallRegistry(t *testing.T) *stallRegistry {
	t.Helper()
	s := &stallRegistry{release: make(chan struct{})}
	s.stall.Store("")
	inner := registry.New(registry.Logger(nopLogger()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hold := func(what string) {
			if s.stall.Load() == what {
				select {
				case <-s.release:
				case <-r.Context().Done():
				}
			}
		}
		switch {
		case r.URL.Path == "/token":
			hold("token")
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"token":"t","access_token":"t"}`))
			return
		case r.URL.Path == "/v2/":
			hold("ping")
		}
		if s.auth.Load() && r.Header.Get("Authorization") != "Bearer t" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="stall"`, r.Host))
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		if strings.Contains(r.URL.Path, "/manifests/") {
			s.reqs.Add(1)
			hold("manifest")
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(s.free) // before the server closes: a stalled handler would hold Close
	u, _ := url.Parse(srv.URL)
	s.host = u.Host
	return s
}

func (s *stallRegistry) free() { s.once.Do(func() { close(s.release) }) }

func (s *stallRegistry) opts() []remote.Option {
	return []remote.Option{remote.WithTransport(http.DefaultTransport.(*http.Transport).Clone()),
		remote.WithRetryBackoff(remote.Backoff{Duration: 1, Factor: 1, Steps: 1})}
}

func (s *stallRegistry) push(t *testing.T, ref string, img v1.Image) name.Digest {
	t.Helper()
	tag, err := name.NewTag(s.host + "/" + ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, s.opts()...); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return tag.Context().Digest(d.String())
}

// A review waits for nothing past its deadline, whatever the registry does:
// a background patch holding the registry client's per-repository set-up
// (the version check, the token) or its manifests must not hold a review
// of another image of that repository.
func TestResolverDeadlineHoldsWhateverTheRegistryDoes(t *testing.T) {
	const deadline = 300 * time.Millisecond
	for _, tc := range []struct {
		stall string
		auth  bool
	}{
		{"ping", false},
		{"ping", true},
		{"token", true},
		{"manifest", false},
		{"manifest", true},
	} {
		t.Run(fmt.Sprintf("%s auth=%v", tc.stall, tc.auth), func(t *testing.T) {
			s := newStallRegistry(t)
			a := s.push(t, "ml/base:a", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
			s.push(t, "ml/base:b", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
			p, err := New(ShimSpec(), WithRemoteOptions(s.opts()...))
			if err != nil {
				t.Fatal(err)
			}
			r := NewResolver(p)
			r.PatchTimeout, r.LookupTimeout = time.Hour, time.Hour // a review held by either never answers
			s.auth.Store(tc.auth)
			s.stall.Store(tc.stall)
			// The stall lasts the whole test: a review that waits for the
			// registry never answers, however fast or slow the machine is.
			defer s.free()
			b := a.Context().Tag("b")
			for i, ref := range []name.Reference{a, b, a, b} {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				answered := make(chan Resolution, 1)
				go func() { answered <- r.Resolve(ctx, ref) }()
				var res Resolution
				select {
				case res = <-answered:
				case <-time.After(20 * time.Second): // far past the deadline, far short of the resolver's own bounds
					t.Fatalf("review %d of %s: no answer while the registry stalls, deadline %s", i, ref, deadline)
				}
				cancel()
				if res.State == StatePatched || res.State == StateCached {
					t.Fatalf("review %d of %s: %+v while the registry stalls", i, ref, res)
				}
			}
		})
	}
}

// Memory stays flat under reviews naming ever new repositories: nothing
// the resolver or the registry client keeps per repository outlives its
// bound.
func TestResolverMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds 6,000 repositories")
	}
	s := newStallRegistry(t)
	p, err := New(ShimSpec(), WithRemoteOptions(s.opts()...))
	if err != nil {
		t.Fatal(err)
	}
	r := NewResolver(p)
	// No limit on the work, so that every repository reaches every cache.
	const bound = 500
	r.Limits = Limits{Concurrent: 64, PerMinute: 1 << 30, PerRepository: 1 << 30, Lookups: 64, Cached: bound}
	feed := func(from, n int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for i := from; i < from+n; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				// A digest that is not there: the patch fails at once, after the client's set-up.
				d, _ := name.NewDigest(fmt.Sprintf("%s/repo%d/img@sha256:%064x", s.host, i, i))
				r.Resolve(context.Background(), d)
				tag, _ := name.NewTag(fmt.Sprintf("%s/repo%d/img:v1", s.host, i))
				r.Resolve(context.Background(), tag)
			}()
		}
		wg.Wait()
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	feed(0, 1500)
	before := heap()
	feed(1500, 6000)
	after := heap()
	runtime.KeepAlive(r) // what it keeps is what is measured
	grew := int64(after) - int64(before)
	t.Logf("heap in use after 1,500 repositories %d KiB, after 7,500 %d KiB: %+d bytes per repository", before>>10, after>>10, grew/6000)
	if grew > 3<<19 { // unbounded caches kept ~780 bytes a repository: 4.5 MiB
		t.Fatalf("the heap grew %d KiB over 6,000 new repositories (%d bytes each): a cache is not bounded", grew>>10, grew/6000)
	}
	for cache, n := range r.Sizes() {
		if n > bound {
			t.Errorf("%s holds %d entries, over its bound of %d", cache, n, bound)
		}
	}
}

// Each cache stays at its bound whatever reviews name, and the least
// recently used entry is what goes: a source in use keeps its answer.
func TestResolverCachesStayAtTheirBound(t *testing.T) {
	r := newRegistry(t)
	src := r.tag(t, "ml/base:v1")
	r.push(t, "ml/base:v1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
	res := NewResolver(patcher(t, r, ShimSpec()))
	const bound = 50
	res.Limits = Limits{Concurrent: 8, PerMinute: 1 << 30, PerRepository: 1 << 30, Lookups: 8, Cached: bound}
	ctx := context.Background()
	want := res.Resolve(ctx, src)
	if want.State != StatePatched {
		t.Fatalf("%+v", want)
	}
	for i := range 10 * bound {
		// Named by tag and by digest, in repositories that do not exist.
		res.Resolve(ctx, r.tag(t, fmt.Sprintf("gone%d/img:v1", i)))
		d, _ := name.NewDigest(fmt.Sprintf("%s/gone%d/img@sha256:%064x", r.host, i, i))
		res.Resolve(ctx, d)
		if i%bound == 0 {
			if got := res.Resolve(ctx, src); got.State != StateCached || got.Patched != want.Patched {
				t.Fatalf("after %d other repositories the source in use: %+v", i, got)
			}
		}
		for cache, n := range res.Sizes() {
			if n > bound {
				t.Fatalf("after %d repositories %s holds %d entries, over its bound of %d", i+1, cache, n, bound)
			}
		}
	}
	sizes := res.Sizes()
	for _, cache := range []string{"failed", "repositories"} {
		if sizes[cache] != bound {
			t.Errorf("%s holds %d entries after %d repositories, want it full at %d", cache, sizes[cache], 10*bound, bound)
		}
	}
}

func TestLRU(t *testing.T) {
	c := newLRU[int, int](3)
	for i := range 5 {
		c.add(i, i)
	}
	if _, ok := c.get(1); ok || c.len() != 3 {
		t.Fatalf("len %d, 1 still there: want the oldest gone", c.len())
	}
	c.get(2) // used: 3 goes next
	c.add(5, 5)
	if _, ok := c.get(3); ok {
		t.Fatal("3 kept over 2, which was used since")
	}
	if v, ok := c.get(2); !ok || v != 2 {
		t.Fatal("2 gone")
	}
	c.remove(2)
	if _, ok := c.get(2); ok || c.len() != 2 {
		t.Fatal("2 not removed")
	}
}

func TestBucket(t *testing.T) {
	var b bucket
	now := time.Now()
	for i := range 3 {
		if !b.fill(now, 3) {
			t.Fatalf("token %d of 3 missing", i)
		}
		b.take()
	}
	if b.fill(now, 3) {
		t.Fatal("a fourth token within the minute")
	}
	if !b.fill(now.Add(20*time.Second), 3) {
		t.Fatal("no token refilled after a third of a minute")
	}
	b.take()
	if b.fill(now.Add(21*time.Second), 3) {
		t.Fatal("two tokens refilled in a third of a minute")
	}
}

// An unauthenticated caller naming ever new images, all at once, causes at
// most the default limits' patches; the rest are answered at once.
func TestResolverBoundsTheWorkACallerCauses(t *testing.T) {
	s := newStallRegistry(t)
	var digests []name.Digest
	for i := range 60 {
		digests = append(digests, s.push(t, fmt.Sprintf("ml/img%d:v1", i), image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})))
	}
	for i := range 20 {
		digests = append(digests, s.push(t, fmt.Sprintf("ml/one:v%d", i), image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})))
	}
	p, err := New(ShimSpec(), WithRemoteOptions(s.opts()...))
	if err != nil {
		t.Fatal(err)
	}
	r := NewResolver(p)
	var patched atomic.Int64
	r.Finished = func(Resolution, time.Duration) { patched.Add(1) }
	s.reqs.Store(0)
	var wg sync.WaitGroup
	for _, d := range digests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r.Resolve(ctx, d)
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	if n := patched.Load(); n > 30 {
		t.Fatalf("%d reviews naming new images at once ran %d patches, want at most 30 (the default per minute)", len(digests), n)
	}
}

// Past a limit, a caller is answered at once, throttled, naming the limit;
// nothing is queued.
func TestResolverLimits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limits      Limits
		repos, each int  // images: repos × each
		held        bool // patches stay in flight
		started     int
		limit       string
	}{
		{"patches at once", Limits{Concurrent: 3, PerMinute: 100, PerRepository: 100}, 8, 1, true, 3, LimitConcurrent},
		{"patches a minute", Limits{Concurrent: 100, PerMinute: 4, PerRepository: 100}, 8, 1, false, 4, LimitRate},
		{"patches a minute of one repository", Limits{Concurrent: 100, PerMinute: 100, PerRepository: 2}, 2, 4, false, 4, LimitRepository},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStallRegistry(t)
			var srcs []name.Digest
			for i := range tc.repos {
				for j := range tc.each {
					srcs = append(srcs, s.push(t, fmt.Sprintf("ml/img%d:v%d", i, j), image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})))
				}
			}
			p, err := New(ShimSpec(), WithRemoteOptions(s.opts()...))
			if err != nil {
				t.Fatal(err)
			}
			r := NewResolver(p)
			r.Limits = tc.limits
			if tc.held {
				s.stall.Store("manifest")
			}
			started := 0
			for _, src := range srcs {
				wait := time.Minute
				if tc.held {
					wait = 50 * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				t0 := time.Now()
				res := r.Resolve(ctx, src)
				took := time.Since(t0)
				cancel()
				switch res.State {
				case StateThrottled:
					if res.Limit != tc.limit || took > 250*time.Millisecond {
						t.Fatalf("%s throttled by %q after %s, want by %q at once", src, res.Limit, took, tc.limit)
					}
				case StatePatched, StatePending:
					started++
				default:
					t.Fatalf("%s: %+v", src, res)
				}
			}
			if started != tc.started {
				t.Fatalf("%d patches started, want %d", started, tc.started)
			}
		})
	}
}

// forgedLabels is img claiming to be version of the patch, made from base.
func forgedLabels(t *testing.T, img v1.Image, version, baseName string, base v1.Hash) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	cf.Config.Labels[LabelName], cf.Config.Labels[LabelVersion] = ShimSpec().Name, version
	cf.Config.Labels[LabelBaseDigest], cf.Config.Labels[LabelBaseName] = base.String(), baseName
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// recordedBase is the base digest the image at ref records.
func recordedBase(t *testing.T, ref string, opts ...remote.Option) (string, v1.Image) {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatalf("%q: %v", ref, err)
	}
	img, err := remote.Image(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.Config.Labels[LabelBaseDigest], img
}

// A pod is never served the patch of an image other than the one it named:
// what an image's labels say it was made from is checked against the
// registry, not believed.
func TestForgedBaseLabels(t *testing.T) {
	old := ShimSpec()
	old.Version = "2"
	digestOf := func(img v1.Image) v1.Hash { d, _ := img.Digest(); return d }
	layerDigests := func(img v1.Image) map[v1.Hash]bool {
		ls, _ := img.Layers()
		out := map[v1.Hash]bool{}
		for _, l := range ls {
			d, _ := l.Digest()
			out[d] = true
		}
		return out
	}
	for _, tc := range []struct {
		name string
		// source pushes X and the image the pod names; it returns the latter and what the pod must run a patch of.
		source func(t *testing.T, r *testRegistry) (named name.Tag, want v1.Image)
	}{
		{"an unrelated image claiming to be an older patch of X", func(t *testing.T, r *testRegistry) (name.Tag, v1.Image) {
			x := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
			r.push(t, "ml/x:v1", x)
			y := forgedLabels(t, image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/bin/app"}), old.Version, r.host+"/ml/x:v1", digestOf(x))
			r.push(t, "ml/y:v1", y)
			return r.tag(t, "ml/y:v1"), y
		}},
		{"an image in X's repository claiming to be an older patch of X", func(t *testing.T, r *testRegistry) (name.Tag, v1.Image) {
			x := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
			r.push(t, "ml/x:v1", x)
			y := forgedLabels(t, image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/bin/app"}), old.Version, r.host+"/ml/x:v1", digestOf(x))
			r.push(t, "ml/x:app", y)
			return r.tag(t, "ml/x:app"), y
		}},
		{"an image built FROM an older patch of X (labels inherited)", func(t *testing.T, r *testRegistry) (name.Tag, v1.Image) {
			parent := olderPatch(t, r, old)
			app, _ := random.Layer(512, types.OCILayer)
			y, err := mutate.Append(parent, mutate.Addendum{Layer: app, History: v1.History{CreatedBy: "RUN make install"}})
			if err != nil {
				t.Fatal(err)
			}
			r.push(t, "ml/x:app", y)
			return r.tag(t, "ml/x:app"), y
		}},
		{"an image built FROM the current patch of X, config changed only", func(t *testing.T, r *testRegistry) (name.Tag, v1.Image) {
			parent := olderPatch(t, r, old)
			cf, _ := parent.ConfigFile()
			cf = cf.DeepCopy()
			cf.Config.Cmd = []string{"/bin/app"}
			cf.History = append(cf.History, v1.History{CreatedBy: `CMD ["/bin/app"]`, EmptyLayer: true})
			y, _ := mutate.ConfigFile(parent, cf)
			r.push(t, "ml/x:app", y)
			return r.tag(t, "ml/x:app"), y
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(t)
			named, want := tc.source(t, r)
			res := NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), named)
			if res.State != StatePatched {
				t.Fatalf("%+v, want the image it named patched", res)
			}
			base, got := recordedBase(t, res.Patched, r.opts()...)
			if base != digestOf(want).String() {
				t.Fatalf("a pod naming %s (%s) is served %s, the patch of %s", named, digestOf(want), res.Patched, base)
			}
			have := layerDigests(got)
			for d := range layerDigests(want) {
				if !have[d] {
					t.Fatalf("a pod naming %s is served %s, which lacks its layer %s", named, res.Patched, d)
				}
			}
		})
	}
}

// A genuine older patch is still upgraded from its recorded base; the
// result is named after the recorded tag only while that tag still holds
// the recorded base, so a forged or stale base name claims no other
// image's destination.
func TestUpgradeNamesItsResultHonestly(t *testing.T) {
	old := ShimSpec()
	old.Version = "2"
	r := newRegistry(t)
	x := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
	r.push(t, "ml/x:v1", x)
	if res := patcher(t, r, old).Apply(context.Background(), r.tag(t, "ml/x:v1")); res.Action != ActionPush {
		t.Fatalf("the older patch: %+v", res)
	}
	genuine, err := remote.Image(r.tag(t, "ml/x:v1-oomguard-init.2"), r.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	xd, _ := x.Digest()
	// The same image, its base name pointing at another tag of the repository.
	renamed := forgedLabels(t, genuine, old.Version, r.host+"/ml/x:victim", xd)
	r.push(t, "ml/x:renamed", renamed)
	victim := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
	r.push(t, "ml/x:victim", victim)

	res := NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), r.tag(t, "ml/x:renamed"))
	if res.State != StatePatched {
		t.Fatalf("the renamed older patch: %+v", res)
	}
	if base, _ := recordedBase(t, res.Patched, r.opts()...); base != xd.String() {
		t.Fatalf("the renamed older patch upgraded to the patch of %s, want of %s", base, xd)
	}
	// The victim tag's own pods still get its patch.
	v := NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), r.tag(t, "ml/x:victim"))
	vd, _ := victim.Digest()
	if v.State != StatePatched {
		t.Fatalf("the tag the forged base name named: %+v, want it patched", v)
	}
	if base, _ := recordedBase(t, v.Patched, r.opts()...); base != vd.String() {
		t.Fatalf("a pod naming the victim tag is served the patch of %s, want of %s", base, vd)
	}
	// The genuine older patch upgrades to the tag named after its base.
	up := NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), r.tag(t, "ml/x:v1-oomguard-init.2"))
	if up.State != StatePatched || up.Action != ActionUnchanged && up.Action != ActionPush {
		t.Fatalf("the genuine older patch: %+v", up)
	}
	if base, _ := recordedBase(t, up.Patched, r.opts()...); base != xd.String() {
		t.Fatalf("the genuine older patch upgraded to the patch of %s, want of %s", base, xd)
	}
	if !r.has(t, "ml/x:v1-"+shimSuffix) {
		t.Fatal("the genuine upgrade is not at the tag named after its base")
	}
}

// A patched tag whose content was replaced with another image's patch,
// labelled as this one's: a pod naming the source is not served it.
func TestForgedPatchedTag(t *testing.T) {
	r := newRegistry(t)
	x := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
	z := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
	r.push(t, "ml/x:v1", x)
	r.push(t, "ml/x:z", z)
	if res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/x:z")); res.Action != ActionPush {
		t.Fatalf("%+v", res)
	}
	pz, err := remote.Image(r.tag(t, "ml/x:z-"+shimSuffix), r.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	xd, _ := x.Digest()
	forged := forgedLabels(t, pz, ShimSpec().Version, r.host+"/ml/x:v1", xd)
	r.push(t, "ml/x:v1-"+shimSuffix, forged)
	res := NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), r.tag(t, "ml/x:v1"))
	if res.State == StatePatched || res.State == StateCached {
		fd, _ := forged.Digest()
		if strings.HasSuffix(res.Patched, fd.String()) {
			t.Fatalf("a pod naming ml/x:v1 is served the forged patched tag %s", res.Patched)
		}
	}
	// Named directly, the forged tag's image is patched as what it is.
	direct := NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), r.tag(t, "ml/x:v1-"+shimSuffix))
	if direct.State == StatePatched {
		fd, _ := forged.Digest()
		if base, _ := recordedBase(t, direct.Patched, r.opts()...); base != fd.String() {
			t.Fatalf("a pod naming the forged tag is served the patch of %s, want of %s", base, fd)
		}
	}
}

// An index is believed to be an older patch of the index it names only
// entry by entry: each the base's, or made from the base's entry for its
// platform. A genuine one is upgraded from its base; one whose
// annotations are forged is patched as the index it is.
func TestForgedIndexAnnotations(t *testing.T) {
	old := ShimSpec()
	old.Version = "2"
	r := newRegistry(t)
	x := initIndex(t)
	xd, _ := x.Digest()
	if err := remote.WriteIndex(r.tag(t, "ml/multi:v1"), x, r.opts()...); err != nil {
		t.Fatal(err)
	}
	if res := patcher(t, r, old).Apply(context.Background(), r.tag(t, "ml/multi:v1")); res.Action != ActionPush {
		t.Fatalf("the older patch: %+v", res)
	}
	forged := mutate.Annotations(initIndex(t), map[string]string{LabelName: old.Name, LabelVersion: old.Version,
		LabelBaseDigest: xd.String(), LabelBaseName: r.host + "/ml/multi:v1"}).(v1.ImageIndex)
	fd, _ := forged.Digest()
	if err := remote.WriteIndex(r.tag(t, "ml/multi:forged"), forged, r.opts()...); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tag, base string
		upgraded  bool
	}{
		{"ml/multi:v1-oomguard-init.2", xd.String(), true},
		{"ml/multi:forged", fd.String(), false},
	} {
		res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, tc.tag))
		if res.Action != ActionPush || res.Upgraded != tc.upgraded || !strings.HasSuffix(res.Base, "@"+tc.base) || (res.Note != "") == tc.upgraded {
			t.Fatalf("%s: %+v, want the patch of %s (upgraded %v)", tc.tag, res, tc.base, tc.upgraded)
		}
	}
}

// olderPatch is spec's result pushed for a new image at ml/x:v1, as a base
// other images are built FROM.
func olderPatch(t *testing.T, r *testRegistry, spec *Spec) v1.Image {
	t.Helper()
	r.push(t, "ml/x:v1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
	if res := patcher(t, r, spec).Apply(context.Background(), r.tag(t, "ml/x:v1")); res.Action != ActionPush {
		t.Fatalf("the older patch: %+v", res)
	}
	img, err := remote.Image(r.tag(t, "ml/x:v1-oomguard-init."+spec.Version), r.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
