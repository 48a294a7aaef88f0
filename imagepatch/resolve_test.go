package imagepatch

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The first admission patches (a push), a second resolver (another
// replica) finds the result with no write, and the cache answers the rest
// with a tag's lookup at most.
func TestResolverPatchesOnceThenCaches(t *testing.T) {
	r := newRegistry(t)
	r.push(t, "ml/base:v1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
	src := r.tag(t, "ml/base:v1")
	ctx := context.Background()

	first := NewResolver(patcher(t, r, ShimSpec()))
	res := first.Resolve(ctx, src)
	if res.State != StatePatched || res.Action != ActionPush {
		t.Fatalf("first: %+v", res)
	}
	want := r.host + "/ml/base@"
	if len(res.Patched) < len(want) || res.Patched[:len(want)] != want {
		t.Fatalf("patched %s: want the source's repository, by digest", res.Patched)
	}
	r.c.reset()
	second := NewResolver(patcher(t, r, ShimSpec()))
	if again := second.Resolve(ctx, src); again.State != StatePatched || again.Action != ActionUnchanged || again.Patched != res.Patched {
		t.Fatalf("another replica: %+v, want %s unchanged", again, res.Patched)
	}
	if n := r.c.count("PUT", ""); n != 0 {
		t.Fatalf("a verified result was written again: %d PUTs", n)
	}
	r.c.reset()
	for range 3 {
		if c := second.Resolve(ctx, src); c.State != StateCached || c.Patched != res.Patched {
			t.Fatalf("cached: %+v", c)
		}
	}
	if n := len(r.c.all()); n != 0 {
		t.Fatalf("warm cache with a fresh tag: %d registry requests, want 0", n)
	}
	// By digest: the same source, named sha256-HEX in its destination tag.
	d := src.Context().Digest(res.SourceDigest[len(src.Context().String())+1:])
	byDigest := second.Resolve(ctx, d)
	if byDigest.State != StateCached || byDigest.Patched != res.Patched {
		t.Fatalf("by digest, after the tag: %+v", byDigest)
	}
	fresh := NewResolver(patcher(t, r, ShimSpec())).Resolve(ctx, d)
	if fresh.State != StatePatched || fresh.Action != ActionPush || fresh.Patched == res.Patched {
		t.Fatalf("by digest alone: %+v (a result of its own, named after the digest)", fresh)
	}
	if !r.has(t, "ml/base:"+DigestTag(d).TagStr()+"-"+shimSuffix) {
		t.Fatalf("no destination tag named after the digest")
	}
}

// Replicas resolving one source at once: one tag, one digest, nothing lost.
func TestResolversAtOnce(t *testing.T) {
	r := newRegistry(t)
	r.push(t, "ml/base:v1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
	src := r.tag(t, "ml/base:v1")
	var wg sync.WaitGroup
	got := make([]Resolution, 6)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), src)
		}()
	}
	wg.Wait()
	for _, g := range got {
		if g.State != StatePatched || g.Patched != got[0].Patched {
			t.Fatalf("%+v, want every replica at %s", g, got[0].Patched)
		}
	}
}

// Past the caller's deadline the answer is pending; the patch finishes in
// the background and the next caller gets it from the cache.
func TestResolverDeadline(t *testing.T) {
	r := newRegistry(t)
	r.push(t, "ml/base:v1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
	src := r.tag(t, "ml/base:v1")
	res := NewResolver(patcher(t, r, ShimSpec()))
	done := make(chan Resolution, 1)
	res.Finished = func(r Resolution, _ time.Duration) { done <- r }
	if _, _, err := res.pin(context.Background(), src); err != nil { // the tag looked up: the patch is what is slow
		t.Fatal(err)
	}
	release := r.c.hold()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if p := res.Resolve(ctx, src); p.State != StatePending {
		t.Fatalf("%+v, want pending", p)
	}
	release()
	fin := <-done
	if c := res.Resolve(context.Background(), src); c.State != StateCached || c.Patched != fin.Patched {
		t.Fatalf("after the background patch: %+v, want %s", c, fin.Patched)
	}
}

// A multi-arch index maps to the patched index; a patched image to itself
// (skipped); an image of a platform the patch has no files for is left as
// it is (skipped, saying so), and not tried again.
func TestResolverIndexSkippedFailed(t *testing.T) {
	r := newRegistry(t)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: image(t, "amd64", types.OCIManifestSchema1, nil, nil), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: image(t, "arm64", types.OCIManifestSchema1, nil, nil), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	if err := remote.WriteIndex(r.tag(t, "ml/multi:v1"), idx); err != nil {
		t.Fatal(err)
	}
	r.push(t, "ml/s390:v1", image(t, "s390x", types.OCIManifestSchema1, nil, nil))
	res := NewResolver(patcher(t, r, ShimSpec()))
	ctx := context.Background()
	got := res.Resolve(ctx, r.tag(t, "ml/multi:v1"))
	if got.State != StatePatched {
		t.Fatalf("index: %+v", got)
	}
	d, err := name.NewDigest(got.Patched)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(d, r.opts()...)
	if err != nil || !desc.MediaType.IsIndex() {
		t.Fatalf("the patched reference is not an index: %v %v", desc, err)
	}
	if s := res.Resolve(ctx, d); s.State != StateSkipped {
		t.Fatalf("the patched index itself: %+v, want skipped", s)
	}
	if f := res.Resolve(ctx, r.tag(t, "ml/s390:v1")); f.State != StateSkipped || f.Error == "" || !slices.Equal(f.Unpatched, []string{"linux/s390x"}) {
		t.Fatalf("s390x: %+v, want skipped, saying why", f)
	}
	r.c.reset()
	if f := res.Resolve(ctx, r.tag(t, "ml/s390:v1")); f.State != StateSkipped || len(r.c.all()) != 0 {
		t.Fatalf("s390x again: %+v with %d requests, want the answer remembered", f, len(r.c.all()))
	}
}
