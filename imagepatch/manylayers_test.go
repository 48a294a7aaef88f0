package imagepatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BenchmarkPatchManyLayers patches an image of 1,000 and of 10,000 layers,
// alone and as an index's entry, in an in-process registry, and reports
// the time a layer: nothing of the layers is read, so it is the same at
// either size (issue 44: at 10,000 a patch took 169 s, the push finding
// each layer by marshalling the whole config again). Each iteration
// patches a tag of its own, so each pushes a result.
//
//	go test -run '^$' -bench PatchManyLayers -benchtime 3x ./imagepatch/
func BenchmarkPatchManyLayers(b *testing.B) {
	for _, index := range []bool{false, true} {
		for _, n := range []int{1000, 10000} {
			kind := "image"
			if index {
				kind = "index"
			}
			b.Run(fmt.Sprintf("%s/layers=%d", kind, n), func(b *testing.B) {
				tag := manyLayers(b, n, index)
				p, err := New(ShimSpec(), WithRegistry(NewTransport(TransportOptions{}), nil))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					src := tag(i)
					b.StartTimer()
					if res := p.Apply(context.Background(), src); res.Action != ActionPush {
						b.Fatalf("%+v", res)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/layer")
			})
		}
	}
}

// Patching costs what the manifest does: an image of 2,000 layers, alone
// and as an index's entry, is patched with a few hundred allocations a
// layer at most (issue 44: the push found each layer by marshalling the
// whole config again, 18,000 allocations a layer at 1,000 layers, ten
// times that at 10,000). Allocations, not time: a loaded machine does not
// change them.
func TestManyLayers(t *testing.T) {
	const n, perLayer = 2000, 1000
	for _, index := range []bool{false, true} {
		tag := manyLayers(t, n, index)
		p, err := New(ShimSpec(), WithRegistry(NewTransport(TransportOptions{}), nil))
		if err != nil {
			t.Fatal(err)
		}
		src := tag(0)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res := p.Apply(context.Background(), src)
		runtime.ReadMemStats(&after)
		if res.Action != ActionPush {
			t.Fatalf("%+v", res)
		}
		got := (after.Mallocs - before.Mallocs) / n
		if got > perLayer {
			t.Errorf("index %v: %d allocations a layer, want at most %d: a cost that grows faster than the layers", index, got, perLayer)
		}
		t.Logf("index %v: %d allocations a layer", index, got)
	}
}

// manyLayers starts a registry holding an image of n layers (small blobs,
// none read) in ml/wide, and gives a function that tags it, or an index of
// it, anew as ml/wide:wI.
func manyLayers(b testing.TB, n int, index bool) func(i int) name.Tag {
	b.Helper()
	blobs := registry.NewInMemoryBlobHandler()
	srv := httptest.NewServer(registry.New(registry.Logger(nopLogger()), registry.WithBlobHandler(blobs)))
	b.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	ctx := context.Background()
	put := func(data []byte) v1.Hash {
		h, _, _ := v1.SHA256(bytes.NewReader(data))
		if err := blobs.(registry.BlobPutHandler).Put(ctx, "ml/wide", h, io.NopCloser(bytes.NewReader(data))); err != nil {
			b.Fatal(err)
		}
		return h
	}
	created := v1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := v1.ConfigFile{OS: "linux", Architecture: "amd64", Created: created, RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Entrypoint: []string{"/entrypoint"}, Env: []string{"PATH=/usr/bin:/bin"}}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for i := range n {
		data := fmt.Appendf(nil, "layer %d", i)
		diff, _, _ := v1.SHA256(bytes.NewReader(fmt.Appendf(nil, "diff %d", i)))
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCILayer, Size: int64(len(data)), Digest: put(data)})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diff)
		cfg.History = append(cfg.History, v1.History{Created: created, CreatedBy: fmt.Sprintf("/bin/sh -c step %d", i)})
	}
	rc, _ := json.Marshal(cfg)
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(rc)), Digest: put(rc)}
	raw, _ := json.Marshal(m)
	top := rawManifest{types.OCIManifestSchema1, raw}
	repo, err := name.NewRepository(u.Host + "/ml/wide")
	if err != nil {
		b.Fatal(err)
	}
	if index {
		h, _, _ := v1.SHA256(bytes.NewReader(raw))
		if err := remote.Put(repo.Digest(h.String()), top); err != nil {
			b.Fatal(err)
		}
		im := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1, Size: int64(len(raw)), Digest: h, Platform: &v1.Platform{OS: "linux", Architecture: "amd64"},
		}}}
		ri, _ := json.Marshal(im)
		top = rawManifest{types.OCIImageIndex, ri}
	}
	return func(i int) name.Tag {
		tag := repo.Tag(fmt.Sprintf("w%d", i))
		if err := remote.Put(tag, top); err != nil {
			b.Fatal(err)
		}
		return tag
	}
}
