package imagepatch

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/oomguard/oomguard/initshim"
)

// counter records every request that reaches the registry.
type counter struct {
	mu   sync.Mutex
	reqs []string // "METHOD path?query"
	next http.RoundTripper
	held chan struct{} // when set, each request waits until it is closed
}

// shimSuffix ends the tags the built-in spec's results get by default.
var shimSuffix = "oomguard-init." + ShimSpec().Version

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	held := c.held
	c.mu.Unlock()
	if held != nil {
		<-held
	}
	return c.next.RoundTrip(r)
}

// hold makes every request wait until the returned function is called.
func (c *counter) hold() (release func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.held = ch
	c.mu.Unlock()
	return func() { c.mu.Lock(); c.held = nil; c.mu.Unlock(); close(ch) }
}

func (c *counter) all() []string { c.mu.Lock(); defer c.mu.Unlock(); return slices.Clone(c.reqs) }

func (r *testRegistry) has(t *testing.T, ref string) bool {
	t.Helper()
	_, err := remote.Head(r.tag(t, ref), r.opts()...)
	return err == nil
}

func (c *counter) count(method, substr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reqs {
		if strings.HasPrefix(r, method+" ") && strings.Contains(r, substr) {
			n++
		}
	}
	return n
}

func (c *counter) reset() { c.mu.Lock(); c.reqs = nil; c.mu.Unlock() }

type testRegistry struct {
	host string
	c    *counter
}

func newRegistry(t *testing.T) *testRegistry {
	t.Helper()
	srv := httptest.NewServer(paginate(registry.New(registry.Logger(nopLogger()))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return &testRegistry{host: u.Host, c: &counter{next: http.DefaultTransport}}
}

func (r *testRegistry) opts() []remote.Option {
	return []remote.Option{remote.WithTransport(r.c), noRetries}
}

var noRetries = remote.WithRetryBackoff(remote.Backoff{Duration: 1, Factor: 1, Steps: 1})

func (r *testRegistry) tag(t *testing.T, ref string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(r.host + "/" + ref)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// image makes a random image of arch with an entrypoint and cmd.
// initIndex is an index of two images, amd64 and arm64, whose command is /sbin/init.
func initIndex(t *testing.T) v1.ImageIndex {
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: image(t, "arm64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
}

func image(t *testing.T, arch string, mt types.MediaType, ep, cmd []string) v1.Image {
	t.Helper()
	img, err := random.Image(1024, 3)
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.MediaType(img, mt)
	if mt == types.DockerManifestSchema2 {
		img = mutate.ConfigMediaType(img, types.DockerConfigJSON)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Entrypoint, cf.Config.Cmd = ep, cmd
	cf.Config.Env = []string{"PATH=/usr/bin:/bin"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func (r *testRegistry) push(t *testing.T, ref string, img v1.Image) {
	t.Helper()
	if err := remote.Write(r.tag(t, ref), img, remote.WithTransport(http.DefaultTransport)); err != nil {
		t.Fatal(err)
	}
}

func patcher(t *testing.T, r *testRegistry, spec *Spec, opts ...Option) *Patcher {
	t.Helper()
	p, err := New(spec, append([]Option{WithRegistry(r.c, nil), WithRemoteOptions(noRetries)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLayerIsReproducible(t *testing.T) {
	s := ShimSpec()
	a, _ := s.Layer("amd64", types.OCILayer)
	b, _ := ShimSpec().Layer("amd64", types.OCILayer)
	c, _ := s.Layer("arm64", types.OCILayer)
	da, _ := a.Digest()
	db, _ := b.Digest()
	dc, _ := c.Digest()
	ia, _ := a.DiffID()
	ib, _ := b.DiffID()
	if da != db || ia != ib {
		t.Fatalf("the same patch gave %s and %s", da, db)
	}
	if da == dc {
		t.Fatal("amd64 and arm64 layers must carry their own binaries")
	}
	tb, _ := s.layerTar("amd64")
	if !strings.Contains(string(tb), ".oomguard/oomguard-init") {
		t.Fatal("the shim is not in the layer")
	}
}

func TestApplyImage(t *testing.T) {
	r := newRegistry(t)
	base := image(t, "amd64", types.OCIManifestSchema1, []string{"/docker-entrypoint.sh"}, []string{"nginx"})
	const tags = 5
	for i := range tags {
		r.push(t, fmt.Sprintf("ml/base:v%d", i), base)
	}
	baseLayers, _ := base.Layers()
	p := patcher(t, r, ShimSpec())
	var srcs []name.Tag
	for i := range tags {
		srcs = append(srcs, r.tag(t, fmt.Sprintf("ml/base:v%d", i)))
	}
	r.c.reset()
	results := p.Run(context.Background(), srcs, true, nil)
	for _, res := range results {
		if res.Action != ActionPush {
			t.Fatalf("%+v", res)
		}
	}
	// No base layer was downloaded; the patch layer went up once.
	for _, l := range baseLayers {
		d, _ := l.Digest()
		if n := r.c.count("GET", d.String()); n != 0 {
			t.Fatalf("base layer %s fetched %d times", d, n)
		}
	}
	pl, _ := ShimSpec().Layer("amd64", types.OCILayer)
	pd, _ := pl.Digest()
	if n := r.c.count("PUT", "digest="+url.QueryEscape(pd.String())); n != 1 {
		t.Fatalf("patch layer uploaded %d times, want once", n)
	}

	got, err := remote.Image(r.tag(t, "ml/base:v0-"+shimSuffix))
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := got.ConfigFile()
	if want := []string{"/.oomguard/oomguard-init", "--", "/docker-entrypoint.sh"}; !slices.Equal(cf.Config.Entrypoint, want) || !slices.Equal(cf.Config.Cmd, []string{"nginx"}) {
		t.Fatalf("entrypoint %q cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	bd, _ := base.Digest()
	if cf.Config.Labels[LabelName] != "oomguard-init" || cf.Config.Labels[LabelVersion] != ShimSpec().Version || cf.Config.Labels[LabelBaseDigest] != bd.String() ||
		cf.Config.Labels[LabelBaseName] != r.host+"/ml/base:v0" {
		t.Fatalf("labels %v", cf.Config.Labels)
	}
	if ls, _ := got.Layers(); len(ls) != len(baseLayers)+1 {
		t.Fatalf("%d layers", len(ls))
	}

	// Again: nothing is pushed.
	r.c.reset()
	for _, res := range p.Run(context.Background(), srcs, true, nil) {
		if res.Action != ActionUnchanged {
			t.Fatalf("re-apply: %+v", res)
		}
	}
	if n := r.c.count("PUT", "/manifests/") + r.c.count("POST", "/blobs/"); n != 0 {
		t.Fatalf("re-apply wrote %d times", n)
	}
	// A result is not patched again.
	if res := p.Apply(context.Background(), r.tag(t, "ml/base:v0-"+shimSuffix)); res.Action != ActionSkipped {
		t.Fatalf("patching a result: %+v", res)
	}
}

func TestUpgradeStartsFromRecordedBase(t *testing.T) {
	r := newRegistry(t)
	base := image(t, "amd64", types.DockerManifestSchema2, nil, nil)
	r.push(t, "ml/base:v1", base)
	if res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/base:v1")); res.Action != ActionPush {
		t.Fatalf("%+v", res)
	}
	v2 := ShimSpec()
	v2.Version += "0"
	// Upgrade from the patched tag, as a platform whose "current" tag points at a result would.
	res := patcher(t, r, v2).Apply(context.Background(), r.tag(t, "ml/base:v1-"+shimSuffix))
	if res.Action != ActionPush || !res.Upgraded || res.Destination != r.host+"/ml/base:v1-oomguard-init."+v2.Version {
		t.Fatalf("%+v", res)
	}
	got, _ := remote.Image(r.tag(t, "ml/base:v1-oomguard-init."+v2.Version))
	ls, _ := got.Layers()
	bl, _ := base.Layers()
	if len(ls) != len(bl)+1 {
		t.Fatalf("upgrade stacked: %d layers on a base of %d", len(ls), len(bl))
	}
	cf, _ := got.ConfigFile()
	bd, _ := base.Digest()
	if cf.Config.Labels[LabelVersion] != v2.Version || cf.Config.Labels[LabelBaseDigest] != bd.String() {
		t.Fatalf("labels %v", cf.Config.Labels)
	}
	// No entrypoint and no cmd: the shim alone, once; no command is made up
	// (a command given at run time follows the shim, as it ran alone before).
	if want := []string{"/.oomguard/oomguard-init", "--"}; !slices.Equal(cf.Config.Entrypoint, want) || len(cf.Config.Cmd) != 0 {
		t.Fatalf("entrypoint %q cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if mt, _ := got.MediaType(); mt != types.DockerManifestSchema2 {
		t.Fatalf("media type %s", mt)
	}
	if l, _ := ls[len(ls)-1].MediaType(); l != types.DockerLayer {
		t.Fatalf("patch layer media type %s on a Docker image", l)
	}
}

func TestIndex(t *testing.T) {
	for _, unpatchable := range []string{"drop", "keep"} {
		t.Run(unpatchable, func(t *testing.T) {
			r := newRegistry(t)
			amd, arm, s390 := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}), image(t, "arm64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}), image(t, "s390x", types.OCIManifestSchema1, nil, nil)
			att, _ := random.Image(100, 1)
			idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
				mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
				mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
				mutate.IndexAddendum{Add: s390, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
				mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"},
					Annotations: map[string]string{"vnd.docker.reference.type": "attestation-manifest"}}},
			)
			if err := remote.WriteIndex(r.tag(t, "ml/multi:v1"), idx); err != nil {
				t.Fatal(err)
			}
			spec := ShimSpec()
			spec.Unpatchable = unpatchable
			res := patcher(t, r, spec).Apply(context.Background(), r.tag(t, "ml/multi:v1"))
			if res.Action != ActionPush {
				t.Fatalf("%+v", res)
			}
			got, err := remote.Index(r.tag(t, "ml/multi:v1-"+shimSuffix))
			if err != nil {
				t.Fatal(err)
			}
			im, _ := got.IndexManifest()
			wantEntries, wantDropped := 4, 0
			if unpatchable == "drop" {
				wantEntries, wantDropped = 2, 2
			}
			if len(im.Manifests) != wantEntries || len(res.Dropped) != wantDropped {
				t.Fatalf("%d entries, dropped %v", len(im.Manifests), res.Dropped)
			}
			od, _ := idx.Digest()
			if im.Annotations[LabelBaseDigest] != od.String() {
				t.Fatalf("index annotations %v", im.Annotations)
			}
			layers := map[string]string{}
			for _, d := range im.Manifests {
				if d.Platform.Architecture != "amd64" && d.Platform.Architecture != "arm64" {
					continue
				}
				img, _ := got.Image(d.Digest)
				ls, _ := img.Layers()
				ld, _ := ls[len(ls)-1].Digest()
				layers[d.Platform.Architecture] = ld.String()
				cf, _ := img.ConfigFile()
				if cf.Architecture != d.Platform.Architecture || cf.Config.Labels[LabelName] != "oomguard-init" {
					t.Fatalf("%s entry config %+v", d.Platform.Architecture, cf.Config.Labels)
				}
			}
			for arch, want := range map[string]types.MediaType{"amd64": types.OCILayer, "arm64": types.OCILayer} {
				l, _ := ShimSpec().Layer(arch, want)
				d, _ := l.Digest()
				if layers[arch] != d.String() {
					t.Fatalf("%s entry has layer %s, want its own shim layer %s", arch, layers[arch], d)
				}
			}
			if again := patcher(t, r, spec).Apply(context.Background(), r.tag(t, "ml/multi:v1")); again.Action != ActionUnchanged {
				t.Fatalf("re-apply: %+v", again)
			}
		})
	}
}

func TestRefusedAndErrors(t *testing.T) {
	r := newRegistry(t)
	r.push(t, "ml/base:v1", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	r.push(t, "ml/base:v1-"+shimSuffix, image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	r.push(t, "ml/base:zarch", image(t, "s390x", types.OCIManifestSchema1, nil, nil))
	before, _ := remote.Head(r.tag(t, "ml/base:v1-"+shimSuffix))
	p := patcher(t, r, ShimSpec())
	res := p.Apply(context.Background(), r.tag(t, "ml/base:v1"))
	if res.Action != ActionRefused || !strings.Contains(res.Error, "already holds") {
		t.Fatalf("%+v", res)
	}
	if after, _ := remote.Head(r.tag(t, "ml/base:v1-"+shimSuffix)); after.Digest != before.Digest {
		t.Fatal("a refused tag was changed")
	}
	if res := p.Apply(context.Background(), r.tag(t, "ml/base:missing")); res.Action != ActionFailed || !strings.Contains(res.Error, "MANIFEST_UNKNOWN") {
		t.Errorf("missing: %+v, want failure with MANIFEST_UNKNOWN", res)
	}
	// An architecture the patch has no files for is left as it is, and said so.
	if res := p.Apply(context.Background(), r.tag(t, "ml/base:zarch")); res.Action != ActionSkipped ||
		!strings.Contains(res.Error, "linux/s390x: the patch has files for amd64, arm64 only; left as it is") || !slices.Equal(res.Unpatched, []string{"linux/s390x"}) {
		t.Errorf("zarch: %+v, want skipped, saying why", res)
	}
	// A reference that is not an image: an artifact manifest, skipped.
	art := rawManifest{mt: "application/vnd.example.artifact.v1+json", body: []byte(`{"schemaVersion":2,"mediaType":"application/vnd.example.artifact.v1+json"}`)}
	if err := remote.Put(r.tag(t, "ml/base:artifact"), art); err != nil {
		t.Fatal(err)
	}
	if res := p.Apply(context.Background(), r.tag(t, "ml/base:artifact")); res.Action != ActionSkipped || !strings.Contains(res.Error, "not an image") {
		t.Errorf("artifact: %+v", res)
	}
	// Unreachable registry.
	gone, _ := name.NewTag("127.0.0.1:1/ml/base:v1")
	if res := p.Apply(context.Background(), gone); res.Action != ActionFailed || !strings.Contains(res.Error, "connection refused") {
		t.Errorf("unreachable: %+v", res)
	}
}

type rawManifest struct {
	mt   types.MediaType
	body []byte
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.body, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

func TestAuthFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	p, _ := New(ShimSpec())
	tag, _ := name.NewTag(u.Host + "/ml/base:v1")
	if res := p.Apply(context.Background(), tag); res.Action != ActionFailed || !strings.Contains(res.Error, "UNAUTHORIZED") {
		t.Fatalf("%+v", res)
	}
}

func TestTagTemplate(t *testing.T) {
	base, _ := name.NewTag("registry.example.com/ml/base:v1")
	for _, tc := range []struct{ tmpl, want, err string }{
		{DefaultTagTemplate, "v1-" + shimSuffix, ""},
		{"{{.Repo}}", "", "not a valid tag"},
		{"{{.Tag}}-{{.Nope}}", "", "map has no entry for key"},
		{"{{.Tag", "", "tag template"},
		{"{{.Tag}}", "", "never overwrites a source"},
		{"{{.Tag}}-" + strings.Repeat("x", 130), "", "not a valid tag"},
	} {
		p, err := New(ShimSpec(), WithTagTemplate(tc.tmpl))
		if err == nil {
			var d name.Tag
			d, err = p.DestinationTag(base)
			if err == nil && d.TagStr() != tc.want {
				t.Errorf("%q gave %q, want %q", tc.tmpl, d.TagStr(), tc.want)
			}
		}
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: error %v, want %q", tc.tmpl, err, tc.err)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	for _, tc := range []struct{ toml, want string }{
		{"name = ", "invalid TOML at line 1"},
		{"name='a'\nversion='1'\nbogus=1\n[config]\nlabels={a='b'}", `unknown key "bogus"`},
		{"name='A B'\nversion='1'\n[config]\nlabels={a='b'}", `name "A B"`},
		{"name='a'\nversion=''\n[config]\nlabels={a='b'}", `version ""`},
		{"name='a'\nversion='1'", "changes nothing"},
		{"name='a'\nversion='1'\n[[file]]\npath='rel'\ncontent='x'", "must be absolute"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\nsource='missing'", "no such file"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\nsource='x'\ncontent='y'", "exactly one of"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\ncontent='y'\nmode=0o17777", "mode"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\ncontent='y'\n[[file]]\npath='/x'\ncontent='z'", "listed twice"},
		{"name='a'\nversion='1'\nunpatchable='fail'\n[config]\nlabels={a='b'}", `unpatchable "fail"`},
		{"name='a'\nversion='1'\n[config]\nlabels={'io.oomguard.patch.name'='b'}", "imagepatch's own"},
	} {
		if _, err := ParseSpec([]byte(tc.toml), dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.toml, err, tc.want)
		}
	}
	if _, err := LoadSpec(filepath.Join(dir, "nope.toml")); err == nil || !strings.Contains(err.Error(), "nope.toml") {
		t.Errorf("missing spec file: %v", err)
	}
	s, err := ParseSpec([]byte("name='motd'\nversion='2'\n[[file]]\npath='/etc/motd'\nsource='x'\n[config]\nenv={A='1'}"), dir)
	if err != nil || s.Architectures() != nil || !s.Supports("riscv64") {
		t.Fatalf("an arch-independent spec: %v %v", err, s.Architectures())
	}
}

// paginate pages tag lists with n, last and a Link header, as the
// distribution spec says (the in-memory registry and Debian's 2.8 registry
// return every tag at once).
func paginate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/tags/list") || n == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		full := r.Clone(r.Context())
		full.URL.RawQuery = ""
		next.ServeHTTP(rec, full)
		var list struct {
			Name string   `json:"name"`
			Tags []string `json:"tags"`
		}
		json.Unmarshal(rec.Body.Bytes(), &list)
		sort.Strings(list.Tags)
		last := r.URL.Query().Get("last")
		i := sort.SearchStrings(list.Tags, last)
		if last != "" && i < len(list.Tags) && list.Tags[i] == last {
			i++
		}
		page := list.Tags[i:min(i+n, len(list.Tags))]
		if i+n < len(list.Tags) {
			w.Header().Set("Link", fmt.Sprintf(`<%s?n=%d&last=%s>; rel="next"`, r.URL.Path, n, page[len(page)-1]))
		}
		json.NewEncoder(w).Encode(map[string]any{"name": list.Name, "tags": page})
	})
}

func TestSelectorFollowsPages(t *testing.T) {
	r := newRegistry(t)
	img := image(t, "amd64", types.OCIManifestSchema1, nil, nil)
	for i := range 35 {
		r.push(t, fmt.Sprintf("ml/many:v%02d", i), img)
	}
	r.push(t, "ml/many:latest", img)
	repo, _ := name.NewRepository(r.host + "/ml/many")
	r.c.reset()
	tags, err := Selector{Globs: []string{"v1*", "v2?"}}.Tags(context.Background(), repo, append(r.opts(), remote.WithPageSize(7))...)
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) != 20 {
		t.Fatalf("%d tags", len(tags))
	}
	if pages := r.c.count("GET", "/tags/list"); pages != 6 {
		t.Fatalf("36 tags in pages of 7 took %d requests, want 6", pages)
	}
	if _, err := (Selector{Globs: []string{"["}}).Tags(context.Background(), repo); err == nil {
		t.Fatal("bad glob accepted")
	}
	refs, err := ReadRefs(strings.NewReader("# images\nreg.example.com/a:v1\n\nreg.example.com/b\n"))
	if err != nil || len(refs) != 2 || refs[1].TagStr() != "latest" {
		t.Fatalf("ReadRefs: %v %v", refs, err)
	}
	if _, err := ReadRefs(strings.NewReader("ok:v1\nreg.example.com/a@sha256:abc\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("ReadRefs digest: %v", err)
	}
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// Two sources that render to one destination are found before anything is
// pushed, and both refused: with --jobs 8 they raced and overwrote each other.
func TestOneDestinationTwoSources(t *testing.T) {
	r := newRegistry(t)
	var srcs []name.Tag
	for i := range 8 {
		r.push(t, fmt.Sprintf("ml/base:v%d", i), image(t, "amd64", types.OCIManifestSchema1, nil, nil))
		srcs = append(srcs, r.tag(t, fmt.Sprintf("ml/base:v%d", i)))
	}
	r.push(t, "ml/base:other", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	srcs = append(srcs, r.tag(t, "ml/other:lone"))
	r.push(t, "ml/other:lone", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	r.c.reset()
	p := patcher(t, r, ShimSpec(), WithTagTemplate("{{.Patch}}"), WithJobs(8))
	res := p.Run(context.Background(), srcs, true, nil)
	refused := 0
	for _, x := range res[:8] {
		if x.Action == ActionRefused && strings.Contains(x.Error, "8 sources") {
			refused++
		}
	}
	if refused != 8 {
		t.Fatalf("want all 8 refused before any push: %+v", res)
	}
	if _, err := remote.Head(r.tag(t, "ml/base:oomguard-init")); err == nil {
		t.Fatal("the contested destination was written")
	}
	if res[8].Action != ActionPush {
		t.Fatalf("an uncontested source in another repository must go on: %+v", res[8])
	}
}

// An index entry whose manifest cannot be fetched, kept as it is: that tag
// fails with a message, the others go on; no panic.
func TestKeepUnfetchableEntry(t *testing.T) {
	r := newRegistry(t)
	amd := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
	missing := image(t, "arm64", types.OCIManifestSchema1, nil, nil)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: missing, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
	)
	if err := remote.WriteIndex(r.tag(t, "ml/multi:v1"), idx); err != nil {
		t.Fatal(err)
	}
	// The s390x entry's manifest deleted since: it dangles.
	md, _ := missing.Digest()
	if err := remote.Delete(r.tag(t, "ml/multi:v1").Context().Digest(md.String())); err != nil {
		t.Fatal(err)
	}
	r.push(t, "ml/single:v1", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	spec := ShimSpec()
	spec.Unpatchable = "keep"
	res := patcher(t, r, spec).Run(context.Background(), []name.Tag{r.tag(t, "ml/multi:v1"), r.tag(t, "ml/single:v1")}, true, nil)
	if res[0].Action != ActionFailed || !strings.Contains(res[0].Error, "s390x") {
		t.Fatalf("dangling entry: %+v", res[0])
	}
	if res[1].Action != ActionPush {
		t.Fatalf("the other tag: %+v", res[1])
	}
}

// The same spec gives the same result, byte for byte, however Go orders its
// maps: a second apply is unchanged, never refused.
func TestReproducibleEnv(t *testing.T) {
	r := newRegistry(t)
	r.push(t, "ml/base:v1", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	text := []byte("name='env'\nversion='1'\n[config]\nenv={A='1',B='2',C='3',D='4',E='5'}\nlabels={x='1',y='2'}")
	digests := map[string]bool{}
	for range 20 {
		s, err := ParseSpec(text, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		res := patcher(t, r, s).Plan(context.Background(), r.tag(t, "ml/base:v1"))
		digests[res.Digest] = true
	}
	if len(digests) != 1 {
		t.Fatalf("%d different digests from one spec", len(digests))
	}
}

// The patch layer holds only its files: a file in /tmp must not turn the
// image's /tmp (1777) into a 0755 root directory.
func TestLayerHasNoParentDirectories(t *testing.T) {
	s, err := ParseSpec([]byte("name='x'\nversion='1'\n[[file]]\npath='/tmp/deep/x'\ncontent='x'"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.layerTar("")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(tb))
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"tmp/deep/x"}) {
		t.Fatalf("layer entries %q", names)
	}
}

func TestSpecRefusesHostileInput(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	os.Symlink("/etc/shadow", filepath.Join(dir, "shadow"))
	os.Symlink("x", filepath.Join(dir, "alias"))
	for _, tc := range []struct{ toml, want string }{
		{"name='a'\nversion='1'\n[[file]]\npath=\"/x\\u0000y\"\ncontent='y'", "control character"},
		{"name='a'\nversion='1'\n[[file]]\npath=\"/x\\ny\"\ncontent='y'", "control character"},
		{"name='a'\nversion='1'\n[config]\nenv={'A=B'='1'}", `env key "A=B"`},
		{"name='a'\nversion='1'\n[config]\nenv={''='1'}", `env key ""`},
		{"name='a'\nversion='1'\n[config]\nenv={\"A\\u0000\"='1'}", "env key"},
		{"name='a'\nversion='1'\n[config]\nenv={A=\"1\\u0000\"}", "env A"},
		{"name='a'\nversion='1'\n[[file]]\npath='/a'\ncontent='y'\n[[file]]\npath='/a/b'\ncontent='z'", "/a is a file"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\nsource='shadow'", "symlink"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\nsource='alias'", "symlink"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\nsource='../x'", "outside"},
	} {
		if _, err := ParseSpec([]byte(tc.toml), dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.toml, err, tc.want)
		}
	}
}

// The embedded shim says the version of the spec that embeds it.
func TestShimVersion(t *testing.T) {
	if v := ShimSpec().Version; v != initshim.Version {
		t.Fatalf("imagepatch/shim.toml has version %q, the shim says %q: bump both with make shims", v, initshim.Version)
	}
}

// kinds counts the counter's requests by method and what they are for.
func (c *counter) kinds() map[string]int {
	m := map[string]int{}
	for _, r := range c.all() {
		method, rest, _ := strings.Cut(r, " ")
		path, _, _ := strings.Cut(rest, "?")
		switch {
		case path == "/v2/":
			m["ping"]++
		case strings.Contains(path, "/manifests/"):
			m["manifest "+method]++
		case strings.Contains(path, "/blobs/uploads/"):
			m["upload "+method]++
		case strings.Contains(path, "/blobs/"):
			m["blob "+method]++
		default:
			m[method+" "+path]++
		}
	}
	return m
}

// Many tags of one repository, 8 at once: a tag costs its manifest and
// config read, the destination looked at just before and just after the
// push, the config uploaded in one request (a single POST, which this
// registry takes) and the manifest put; the pings and the patch layer are
// the run's (issue 33: 10 a tag before; issue 44: 7, the config in two).
func TestRequestsPerTag(t *testing.T) {
	r := newRegistry(t)
	base := image(t, "amd64", types.OCIManifestSchema1, []string{"/entrypoint"}, nil)
	const n = 24
	var srcs []name.Tag
	for i := range n {
		cf, _ := base.ConfigFile()
		cf = cf.DeepCopy()
		cf.Config.Labels = map[string]string{"build": strconv.Itoa(i)}
		img, _ := mutate.ConfigFile(base, cf)
		r.push(t, fmt.Sprintf("ml/many:v%02d", i), img)
		srcs = append(srcs, r.tag(t, fmt.Sprintf("ml/many:v%02d", i)))
	}
	p := patcher(t, r, ShimSpec(), WithJobs(8))
	r.c.reset()
	for _, res := range p.Run(context.Background(), srcs, true, nil) {
		if res.Action != ActionPush {
			t.Fatalf("%+v", res)
		}
	}
	got := r.c.kinds()
	// The run's puller, pusher and uploads ping the registry once each,
	// each over https first (a loopback registry is tried on both).
	if got["ping"] > 6 {
		t.Errorf("%d pings", got["ping"])
	}
	delete(got, "ping")
	want := map[string]int{
		"manifest GET": n, "blob GET": n, // the source
		"manifest HEAD": 2 * n,                    // its destination, just before and just after the push
		"upload POST":   n + 1, "manifest PUT": n, // its config and manifest; the patch layer once
		"blob HEAD": 1, "upload PATCH": 1, "upload PUT": 1, // the patch layer, looked for and uploaded once
	}
	if !maps.Equal(got, want) {
		t.Fatalf("requests by kind %v, want %v", got, want)
	}
}

// An upgrade reads the recorded base once: the image that verified the
// claim is the one patched (its config was read again before), and an
// index's entries are read once for the check and the patch.
func TestUpgradeReadsTheBaseOnce(t *testing.T) {
	r := newRegistry(t)
	base := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"})
	r.push(t, "ml/base:v1", base)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: base, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	if err := remote.WriteIndex(r.tag(t, "ml/base:multi"), idx); err != nil {
		t.Fatal(err)
	}
	old := ShimSpec()
	old.Version = "2"
	for _, tag := range []string{"v1", "multi"} {
		if res := patcher(t, r, old).Apply(context.Background(), r.tag(t, "ml/base:"+tag)); res.Action != ActionPush {
			t.Fatalf("%s: %+v", tag, res)
		}
	}
	bd, _ := base.Digest()
	cd, _ := base.ConfigName()
	for _, tag := range []string{"v1", "multi"} {
		r.c.reset()
		res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/base:"+tag+"-oomguard-init.2"))
		if res.Action != ActionPush || !res.Upgraded {
			t.Fatalf("%s: %+v", tag, res)
		}
		if n := r.c.count("GET", "/blobs/"+cd.String()); n != 1 {
			t.Errorf("%s: the base's config read %d times, want once", tag, n)
		}
		if n := r.c.count("GET", "/manifests/"+bd.String()); n != 1 {
			t.Errorf("%s: the base image's manifest read %d times, want once", tag, n)
		}
	}
}

// faultyUploads answers the patcher's own upload requests as told, and
// passes everything else to the registry.
func faultyUploads(t *testing.T, answer func(w http.ResponseWriter, r *http.Request) bool) *testRegistry {
	t.Helper()
	inner := paginate(registry.New(registry.Logger(nopLogger())))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !answer(w, r) {
			inner.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return &testRegistry{host: u.Host, c: &counter{next: http.DefaultTransport}}
}

// The patcher's own upload gives way to go-containerregistry's writer, with
// its retries, when it fails; and a Location elsewhere gets no request.
func TestOwnUploadGivesWay(t *testing.T) {
	var elsewhere, posts atomic.Int64
	var armed atomic.Bool // after the seeding
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	// The patcher's own: a single POST, or a PUT with the body; not
	// go-containerregistry's (a POST with no digest, a PUT with none).
	own := func(r *http.Request) bool {
		return armed.Load() && strings.Contains(r.URL.Path, "/blobs/uploads/") && r.ContentLength > 0 && r.ContentLength < 64<<10 &&
			(r.Method == http.MethodPut || r.Method == http.MethodPost && r.URL.Query().Has("digest"))
	}
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request) bool
	}{
		{"the single POST fails", func(w http.ResponseWriter, r *http.Request) bool {
			if own(r) && r.Method == http.MethodPost {
				http.Error(w, `{"errors":[{"code":"UNKNOWN"}]}`, http.StatusInternalServerError)
				return true
			}
			return false
		}},
		// A registry that takes no single POST starts an upload instead.
		{"the PUT fails", func(w http.ResponseWriter, r *http.Request) bool {
			switch {
			case own(r) && r.Method == http.MethodPost:
				w.Header().Set("Location", r.URL.Path+"started")
				w.WriteHeader(http.StatusAccepted)
				return true
			case own(r):
				http.Error(w, `{"errors":[{"code":"UNKNOWN"}]}`, http.StatusInternalServerError)
				return true
			}
			return false
		}},
		// The second upload started is the config's (the patch layer's
		// is the first), the patcher's own.
		{"the Location is another host", func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/blobs/uploads/") && armed.Load() && posts.Add(1) == 2 {
				w.Header().Set("Location", other.URL+r.URL.Path+"upload")
				w.WriteHeader(http.StatusAccepted)
				return true
			}
			return false
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := faultyUploads(t, tc.answer)
			r.push(t, "ml/base:v1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
			armed.Store(true)
			defer armed.Store(false)
			posts.Store(0)
			if res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/base:v1")); res.Action != ActionPush {
				t.Fatalf("%+v", res)
			}
			if n := elsewhere.Load(); n != 0 {
				t.Fatalf("%d requests went to the other host", n)
			}
			// The patch layer's upload, and the config's by go-containerregistry.
			if n := r.c.count("PATCH", "/blobs/uploads/"); n != 2 {
				t.Fatalf("%d PATCH uploads, want 2: the config's went up some other way", n)
			}
		})
	}
}

// A registry that takes no single POST (distribution's) answers one as an
// upload started, its body unread: the config goes again with the PUT,
// and the session's later uploads start with an empty POST.
func TestSinglePostNotTaken(t *testing.T) {
	r := registryBehind(t, func(w http.ResponseWriter, req *http.Request, next http.Handler) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/blobs/uploads/") && req.URL.Query().Has("digest") {
			req = req.Clone(req.Context())
			q := req.URL.Query()
			q.Del("digest")
			req.URL.RawQuery, req.Body, req.ContentLength = q.Encode(), http.NoBody, 0
		}
		next.ServeHTTP(w, req)
	})
	const n = 4
	var srcs []name.Tag
	for i := range n {
		r.push(t, fmt.Sprintf("ml/base:v%d", i), image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
		srcs = append(srcs, r.tag(t, fmt.Sprintf("ml/base:v%d", i)))
	}
	r.c.reset()
	for _, res := range patcher(t, r, ShimSpec(), WithJobs(1)).Run(context.Background(), srcs, true, nil) {
		if res.Action != ActionPush {
			t.Fatalf("%+v", res)
		}
		img, err := remote.Image(r.tag(t, strings.TrimPrefix(res.Destination, r.host+"/")), r.opts()...)
		if err == nil {
			_, err = img.ConfigFile()
		}
		if err != nil {
			t.Fatalf("%s: %v", res.Destination, err)
		}
	}
	if got := r.c.count("POST", "digest="); got != 1 {
		t.Errorf("%d single POSTs, want 1: the first, which was not taken", got)
	}
	// Each config's, and the patch layer's (go-containerregistry's writer).
	if got := r.c.count("PUT", "/blobs/uploads/"); got != n+1 {
		t.Errorf("%d upload PUTs, want %d", got, n+1)
	}
}

func TestBlobUnread(t *testing.T) {
	codes := func(cs ...transport.ErrorCode) error {
		e := &transport.Error{StatusCode: http.StatusBadRequest}
		for _, c := range cs {
			e.Errors = append(e.Errors, transport.Diagnostic{Code: c})
		}
		return fmt.Errorf("push x: %w", e)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the link read empty (distribution 2.8)", codes(transport.DigestInvalidErrorCode, transport.ManifestBlobUnknownErrorCode), true},
		{"a blob unknown", codes(transport.ManifestBlobUnknownErrorCode), true},
		{"a child manifest unknown", codes(transport.BlobUnknownErrorCode), true},
		{"an invalid manifest too", codes(transport.ManifestBlobUnknownErrorCode, transport.ManifestInvalidErrorCode), false},
		{"denied", codes(transport.DeniedErrorCode), false},
		{"no codes", codes(), false},
		{"not the registry's", errors.New("connection refused"), false},
	} {
		if got := blobUnread(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
