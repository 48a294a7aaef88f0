package imagepatch

// Images as platform teams have them (issue 34): indexes with layers of
// gigabytes and Windows entries, images without a command or a history,
// systemd images run by podman, tags that move, signatures beside the
// images, registries that rate-limit, Docker manifest lists.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// registryBehind is an in-memory registry behind handler, which gets
// every request first and passes it on with next.
func registryBehind(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, next http.Handler)) *testRegistry {
	t.Helper()
	reg := registry.New(registry.Logger(nopLogger()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w, r, reg) }))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return &testRegistry{host: u.Host, c: &counter{next: http.DefaultTransport}}
}

func indexOf(t *testing.T, mt types.MediaType, entries ...mutate.IndexAddendum) v1.ImageIndex {
	t.Helper()
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, mt), entries...)
}

func entry(img v1.Image, os, arch string) mutate.IndexAddendum {
	return mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: os, Architecture: arch}}}
}

func (r *testRegistry) pushIndex(t *testing.T, ref string, idx v1.ImageIndex) {
	t.Helper()
	if err := remote.WriteIndex(r.tag(t, ref), idx); err != nil {
		t.Fatal(err)
	}
}

// A HEAD's Content-Length is the size of a body that never comes: a CUDA
// base image's layer of gigabytes, looked at (never read) when the patched
// index is pushed, must not fail it. Bodies that are read stay bounded.
func TestHeadOfAHugeLayer(t *testing.T) {
	const huge = "1073826018"
	r := registryBehind(t, func(w http.ResponseWriter, req *http.Request, next http.Handler) {
		if req.Method == http.MethodHead && strings.Contains(req.URL.Path, "/blobs/sha256:") {
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, req)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			if rec.Code == http.StatusOK {
				w.Header().Set("Content-Length", huge)
			}
			w.WriteHeader(rec.Code)
			return
		}
		next.ServeHTTP(w, req)
	})
	r.pushIndex(t, "ml/cuda:12", indexOf(t, types.OCIImageIndex,
		entry(image(t, "amd64", types.OCIManifestSchema1, nil, []string{"python"}), "linux", "amd64"),
		entry(image(t, "arm64", types.OCIManifestSchema1, nil, []string{"python"}), "linux", "arm64")))
	tr := NewTransport(TransportOptions{})
	p, err := New(ShimSpec(), WithRegistry(tr, nil), WithRemoteOptions(noRetries))
	if err != nil {
		t.Fatal(err)
	}
	if res := p.Apply(context.Background(), r.tag(t, "ml/cuda:12")); res.Action != ActionPush {
		t.Fatalf("an index with a layer of %s bytes: %+v", huge, res)
	}

	// The bound is on what is read: a GET answering that much is refused.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Length", huge)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	for method, tooLarge := range map[string]bool{http.MethodHead: false, http.MethodGet: true} {
		req, _ := http.NewRequest(method, srv.URL+"/v2/ml/cuda/blobs/sha256:0", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if (err != nil) != tooLarge || (err != nil && !strings.Contains(err.Error(), ErrTooLarge.Error())) {
			t.Errorf("%s of a blob of %s bytes: %v", method, huge, err)
		}
	}
}

// Only linux entries of the architectures the patch has files for are
// patched. A windows entry (and any other operating system's, or one with
// os.features the patch does not know) is passed through unchanged, under
// unpatchable = "drop" too, and said so; a windows image alone is left as
// it is, and said so.
func TestOtherOperatingSystemsPassThrough(t *testing.T) {
	for _, unpatchable := range []string{"drop", "keep"} {
		t.Run(unpatchable, func(t *testing.T) {
			r := newRegistry(t)
			win := image(t, "amd64", types.OCIManifestSchema1, []string{"cmd.exe", "/c"}, nil)
			cf, _ := win.ConfigFile()
			cf = cf.DeepCopy()
			cf.OS, cf.OSVersion = "windows", "10.0.20348.2113"
			win, _ = mutate.ConfigFile(win, cf)
			winEntry := mutate.IndexAddendum{Add: win, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "windows", Architecture: "amd64", OSVersion: "10.0.20348.2113"}}}
			featured := mutate.IndexAddendum{Add: image(t, "arm64", types.OCIManifestSchema1, nil, []string{"x"}),
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", OSFeatures: []string{"future"}}}}
			idx := indexOf(t, types.OCIImageIndex, entry(image(t, "amd64", types.OCIManifestSchema1, nil, []string{"x"}), "linux", "amd64"), winEntry, featured)
			r.pushIndex(t, "ml/mixed:v1", idx)
			r.push(t, "ml/win:v1", win)
			spec := ShimSpec()
			spec.Unpatchable = unpatchable
			p := patcher(t, r, spec)
			res := p.Apply(context.Background(), r.tag(t, "ml/mixed:v1"))
			if res.Action != ActionPush || !slices.Equal(res.Unpatched, []string{"windows/amd64:10.0.20348.2113", "linux/arm64"}) {
				t.Fatalf("%+v", res)
			}
			got, err := remote.Index(r.tag(t, "ml/mixed:v1-"+shimSuffix))
			if err != nil {
				t.Fatal(err)
			}
			im, _ := got.IndexManifest()
			wd, _ := win.Digest()
			var kept, patched []string
			for _, d := range im.Manifests {
				if d.Platform.OS == "windows" {
					if d.Digest != wd {
						t.Fatalf("the windows entry was changed: %s, was %s", d.Digest, wd)
					}
					kept = append(kept, d.Platform.OS)
					continue
				}
				img, _ := got.Image(d.Digest)
				c, _ := img.ConfigFile()
				if c.Config.Labels[LabelName] != "" {
					patched = append(patched, d.Platform.String())
				}
			}
			if len(kept) != 1 || !slices.Equal(patched, []string{"linux/amd64"}) {
				t.Fatalf("kept %v, patched %v; want windows kept and only linux/amd64 patched", kept, patched)
			}
			if len(res.Kept) == 0 || !strings.Contains(strings.Join(res.Kept, " "), "the patch is for linux, not windows") {
				t.Fatalf("kept %q: want the windows entry named, and why", res.Kept)
			}
			one := p.Apply(context.Background(), r.tag(t, "ml/win:v1"))
			if one.Action != ActionSkipped || !strings.Contains(one.Error, "not windows") || len(one.Unpatched) != 1 {
				t.Fatalf("a windows image: %+v, want it left as it is", one)
			}
			// The webhook, on demand: the same.
			rv := NewResolver(patcher(t, r, spec))
			if w := rv.Resolve(context.Background(), r.tag(t, "ml/win:v1")); w.State != StateSkipped || len(w.Unpatched) != 1 {
				t.Fatalf("on demand, a windows image: %+v", w)
			}
			if m := rv.Resolve(context.Background(), r.tag(t, "ml/mixed:v1")); m.State != StatePatched || len(m.Unpatched) != 2 {
				t.Fatalf("on demand, the mixed index: %+v", m)
			}
		})
	}
}

// The command an image runs with, as Kubernetes and podman put it
// together from the image's entrypoint and cmd and what the container
// gives (podman run IMAGE cmd… is args:, --entrypoint is command:).
func effective(ep, cmd, command, args []string) []string {
	if len(ep) == 1 && ep[0] == "" {
		ep = nil
	}
	switch {
	case command != nil && args != nil:
		return slices.Concat(command, args)
	case command != nil:
		return command
	case args != nil:
		return slices.Concat(ep, args)
	}
	return slices.Concat(ep, cmd)
}

// Every combination of ENTRYPOINT, CMD, command: and args: runs on the
// patched image what it ran on the source, behind the shim: no command is
// made up for an image that has none (args: ran as init's arguments), and
// podman's systemd mode is on for the patched image exactly where it was
// for the source when it runs with the image's own command. (With
// command:, the webhook puts the shim back: imagepatch/admission's table.)
func TestCommandTable(t *testing.T) {
	spec := ShimSpec()
	pre, initPre := spec.Config.EntrypointPrefix, spec.Config.InitEntrypointPrefix
	r := newRegistry(t)
	p := patcher(t, r, spec)
	images := []struct{ ep, cmd []string }{
		{nil, nil},
		{nil, []string{"/bin/serve", "--port=80"}},
		{[]string{"/docker-entrypoint.sh"}, nil},
		{[]string{"/docker-entrypoint.sh"}, []string{"nginx", "-g", "daemon off;"}},
		{[]string{""}, []string{"/bin/serve"}},
		{nil, []string{"/sbin/init"}},
		{nil, []string{"/usr/sbin/init"}},
		{[]string{"/lib/systemd/systemd"}, []string{"--log-level=info"}},
		{[]string{"/usr/local/sbin/init"}, nil},
		{nil, []string{"/bin/sh", "-c", "/sbin/init"}},
		{[]string{"/bin/sh", "-c"}, []string{"exec /sbin/init"}},
	}
	for i, im := range images {
		ref := fmt.Sprintf("ml/cmd:c%d", i)
		r.push(t, ref, image(t, "amd64", types.OCIManifestSchema1, im.ep, im.cmd))
		res := p.Apply(context.Background(), r.tag(t, ref))
		if res.Action != ActionPush {
			t.Fatalf("%q %q: %+v", im.ep, im.cmd, res)
		}
		got, _ := remote.Image(r.tag(t, ref+"-"+shimSuffix))
		cf, _ := got.ConfigFile()
		ep, cmd := cf.Config.Entrypoint, cf.Config.Cmd
		srcDefault := effective(im.ep, im.cmd, nil, nil)
		if res.NoCommand != (len(srcDefault) == 0) {
			t.Errorf("%q %q: noCommand %v", im.ep, im.cmd, res.NoCommand)
		}
		// podman (4.x) runs the image's own command in systemd mode where it
		// did for the source, and in no more.
		if got, want := PodmanSystemd(slices.Concat(ep, cmd)), PodmanSystemd(srcDefault); got != want {
			t.Errorf("%q %q: podman's systemd mode %v on the patched image (%q %q), %v on the source", im.ep, im.cmd, got, ep, cmd, want)
		}
		for _, pod := range []struct{ command, args []string }{
			{nil, nil}, {nil, []string{"/bin/echo", "hi"}}, {[]string{"/bin/app"}, nil}, {[]string{"/bin/app"}, []string{"--flag"}},
		} {
			src := effective(im.ep, im.cmd, pod.command, pod.args)
			patched := effective(ep, cmd, pod.command, pod.args)
			if pod.command != nil {
				continue // the webhook's part
			}
			if len(src) == 0 {
				// The source does not start (no command): the patched one
				// runs the shim alone, which the webhook does not let run.
				if !slices.Equal(patched, pre) {
					t.Errorf("%q %q, nothing given: the patched image runs %q", im.ep, im.cmd, patched)
				}
				continue
			}
			if !slices.Equal(patched, slices.Concat(pre, src)) && !slices.Equal(patched, slices.Concat(initPre, src)) {
				t.Errorf("%q %q with command %q args %q: the source runs %q, the patched image %q", im.ep, im.cmd, pod.command, pod.args, src, patched)
			}
		}
	}
	// A spec's default command is the cmd of an image that has none: a
	// command given at run time replaces it, as it replaced nothing before.
	custom := ShimSpec()
	custom.Config.DefaultCommand = []string{"/sbin/init"}
	custom.Version = "custom"
	r.push(t, "ml/cmd:none", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	if res := patcher(t, r, custom).Apply(context.Background(), r.tag(t, "ml/cmd:none")); res.Action != ActionPush {
		t.Fatalf("%+v", res)
	}
	got, _ := remote.Image(r.tag(t, "ml/cmd:none-oomguard-init.custom"))
	cf, _ := got.ConfigFile()
	if !slices.Equal(cf.Config.Entrypoint, initPre) || !slices.Equal(cf.Config.Cmd, []string{"/sbin/init"}) ||
		!slices.Equal(effective(cf.Config.Entrypoint, cf.Config.Cmd, nil, []string{"/bin/echo", "hi"}), slices.Concat(initPre, []string{"/bin/echo", "hi"})) {
		t.Fatalf("default command: entrypoint %q cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
	}
}

// What the shim is named under for podman: a link in the patch layer to
// the shim itself, and the spec checks the init prefix is a name podman's
// systemd mode knows.
func TestInitPrefixAndLinks(t *testing.T) {
	tb, err := ShimSpec().layerTar("amd64")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tb), ".oomguard/systemd") || !strings.Contains(string(tb), "oomguard-init") {
		t.Fatal("the systemd name is not in the layer")
	}
	for _, tc := range []struct{ toml, want string }{
		{"name='a'\nversion='1'\n[config]\nentrypoint_prefix=['/x']\ninit_entrypoint_prefix=['/x/init']", "base name is systemd"},
		{"name='a'\nversion='1'\n[config]\nlabels={a='b'}\ninit_entrypoint_prefix=['/x/systemd']", "needs an entrypoint_prefix"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\nlink='y'\ncontent='z'", "exactly one of"},
		{"name='a'\nversion='1'\n[[file]]\npath='/x'\nlink=\"y\\nz\"", "control character"},
	} {
		if _, err := ParseSpec([]byte(tc.toml), t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.toml, err, tc.want)
		}
	}
	for cmd, want := range map[string]bool{"/sbin/init": true, "/usr/sbin/init": true, "/usr/local/sbin/init": true, "/lib/systemd/systemd": true,
		"/.oomguard/systemd": true, "/bin/sh -c /sbin/init": true, "/bin/init": false, "/.oomguard/oomguard-init": false, "/bin/sh -c": false, "": false} {
		if got := PodmanSystemd(strings.Fields(cmd)); got != want {
			t.Errorf("%q: %v", cmd, got)
		}
	}
}

// A tag that moves is followed: its new image's patch goes under a name
// no other base's can have (its digest), the old result stays, and what
// was done is said; a second run, and the webhook, find it.
func TestMovedTag(t *testing.T) {
	r := newRegistry(t)
	first := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/bin/serve"})
	r.push(t, "ml/base:v1", first)
	p := patcher(t, r, ShimSpec())
	if res := p.Apply(context.Background(), r.tag(t, "ml/base:v1")); res.Action != ActionPush {
		t.Fatalf("%+v", res)
	}
	old, _ := remote.Head(r.tag(t, "ml/base:v1-"+shimSuffix))
	moved := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/bin/serve"})
	r.push(t, "ml/base:v1", moved)
	md, _ := moved.Digest()
	byDigest := "ml/base:sha256-" + md.Hex + "-" + shimSuffix

	if plan := p.Plan(context.Background(), r.tag(t, "ml/base:v1")); plan.Action != ActionPush || plan.Destination != r.host+"/"+byDigest {
		t.Fatalf("plan: %+v", plan)
	}
	res := p.Apply(context.Background(), r.tag(t, "ml/base:v1"))
	if res.Action != ActionPush || res.Destination != r.host+"/"+byDigest || !strings.Contains(res.Note, "moved") {
		t.Fatalf("the moved tag: %+v, want its patch pushed under %s, saying the tag moved", res, byDigest)
	}
	if now, _ := remote.Head(r.tag(t, "ml/base:v1-"+shimSuffix)); now.Digest != old.Digest {
		t.Fatal("the earlier result was overwritten")
	}
	if base, _ := recordedBase(t, r.host+"/ml/base@"+res.Digest, r.opts()...); base != md.String() {
		t.Fatalf("the patch under %s is of %s, want of %s", byDigest, base, md)
	}
	if again := p.Apply(context.Background(), r.tag(t, "ml/base:v1")); again.Action != ActionUnchanged || again.Digest != res.Digest {
		t.Fatalf("again: %+v", again)
	}
	// The webhook serves it, and says under which tag; by digest the same.
	rv := NewResolver(patcher(t, r, ShimSpec()))
	w := rv.Resolve(context.Background(), r.tag(t, "ml/base:v1"))
	if w.State != StatePatched || w.Patched != r.host+"/ml/base@"+res.Digest || w.Destination != r.host+"/"+byDigest {
		t.Fatalf("on demand: %+v", w)
	}
	if d := NewResolver(patcher(t, r, ShimSpec())).Resolve(context.Background(), r.tag(t, "ml/base:v1").Context().Digest(md.String())); d.Patched != w.Patched {
		t.Fatalf("by digest: %+v, want %s", d, w.Patched)
	}
	// Something that is not a result of this patch in the destination is
	// still refused, not renamed around.
	r.push(t, "ml/base:v2", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	r.push(t, "ml/base:v2-"+shimSuffix, image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	if x := p.Apply(context.Background(), r.tag(t, "ml/base:v2")); x.Action != ActionRefused {
		t.Fatalf("another image in the destination: %+v", x)
	}
}

// A source that keeps failing is tried again less and less often.
func TestFailuresBackOff(t *testing.T) {
	r := NewResolver(nil)
	if r.failedFor(1) != 5*time.Minute || r.failedFor(2) != 10*time.Minute || r.failedFor(4) != 40*time.Minute || r.failedFor(9) != time.Hour {
		t.Fatalf("%s %s %s %s", r.failedFor(1), r.failedFor(2), r.failedFor(4), r.failedFor(9))
	}
	reg := newRegistry(t)
	reg.push(t, "ml/x:v1", image(t, "amd64", types.OCIManifestSchema1, nil, nil))
	reg.push(t, "ml/x:v1-"+shimSuffix, image(t, "amd64", types.OCIManifestSchema1, nil, nil)) // another image: refused
	rv := NewResolver(patcher(t, reg, ShimSpec()))
	rv.FailedTTL, rv.MaxFailedTTL = time.Millisecond, time.Hour
	src := reg.tag(t, "ml/x:v1")
	for range 3 {
		if f := rv.Resolve(context.Background(), src); f.State != StateFailed {
			t.Fatalf("%+v", f)
		}
		time.Sleep(time.Duration(1<<rv.Sizes()["failed"]) * 5 * time.Millisecond)
	}
	d, err := remote.Head(src, reg.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := rv.failed.get(src.Context().Digest(d.Digest.String()).String())
	if f.n < 2 {
		t.Fatalf("%d failures in a row counted", f.n)
	}
}

// Signatures, attestations, SBOMs and referrers indexes beside the images
// are artifacts: a --repo run leaves their tags out, and one named is
// skipped, saying so; none fails.
func TestArtifactsAreSkipped(t *testing.T) {
	r := newRegistry(t)
	img := image(t, "amd64", types.OCIManifestSchema1, nil, []string{"x"})
	r.push(t, "ml/signed:v1", img)
	d, _ := img.Digest()
	tagOf := func(suffix string) string { return "ml/signed:sha256-" + d.Hex + suffix }
	layer := func(mt types.MediaType, body string) mutate.Addendum {
		return mutate.Addendum{Layer: static.NewLayer([]byte(body), mt), MediaType: mt}
	}
	// cosign's: an OCI image config (almost empty), layers of its own types.
	cosign := func(mt types.MediaType) v1.Image {
		a, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer(mt, `{"payload":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	r.push(t, tagOf(".sig"), cosign("application/vnd.dev.cosign.simplesigning.v1+json"))
	r.push(t, tagOf(".att"), cosign("application/vnd.dsse.envelope.v1+json"))
	r.push(t, tagOf(".sbom"), cosign("text/spdx+json"))
	// An OCI 1.1 artifact, and the referrers fallback index listing it.
	art := mutate.ConfigMediaType(mutate.MediaType(cosign("application/vnd.example.sig"), types.OCIManifestSchema1), types.OCIEmptyJSON)
	r.push(t, "ml/signed:an-artifact", art)
	ad, _ := art.Digest()
	as, _ := art.Size()
	referrers := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%d,"artifactType":"application/vnd.example.sig"}]}`, ad, as)
	if err := remote.Put(r.tag(t, tagOf("")), rawManifest{mt: types.OCIImageIndex, body: []byte(referrers)}); err != nil {
		t.Fatal(err)
	}
	repo, _ := name.NewRepository(r.host + "/ml/signed")
	tags, left, err := Selector{}.Select(context.Background(), repo, r.opts()...)
	if err != nil || left != 4 || len(tags) != 2 {
		t.Fatalf("selected %v, left out %d: %v", tags, left, err)
	}
	p := patcher(t, r, ShimSpec())
	srcs := []name.Tag{r.tag(t, tagOf(".sig")), r.tag(t, tagOf(".att")), r.tag(t, tagOf(".sbom")), r.tag(t, tagOf("")), r.tag(t, "ml/signed:an-artifact"), r.tag(t, "ml/signed:v1")}
	for i, res := range p.Run(context.Background(), srcs, true, nil) {
		want := ActionSkipped
		if i == len(srcs)-1 {
			want = ActionPush
		}
		if res.Action != want || (want == ActionSkipped && !strings.Contains(res.Error, "artifact")) {
			t.Errorf("%s: %+v, want %s", srcs[i], res, want)
		}
	}
}

// An upgrade run whose selector also picks the earlier version's results:
// each is recognised as the earlier result of its base, whose patch this
// run makes anyway; nothing is refused.
func TestUpgradeOverItsOwnResults(t *testing.T) {
	r := newRegistry(t)
	old := ShimSpec()
	old.Version = "3"
	for _, tag := range []string{"v1", "v2"} {
		r.push(t, "ml/base:"+tag, image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/bin/serve"}))
		if res := patcher(t, r, old).Apply(context.Background(), r.tag(t, "ml/base:"+tag)); res.Action != ActionPush {
			t.Fatalf("%+v", res)
		}
	}
	repo, _ := name.NewRepository(r.host + "/ml/base")
	tags, err := Selector{}.Tags(context.Background(), repo, r.opts()...)
	if err != nil || len(tags) != 4 {
		t.Fatalf("%v %v", tags, err)
	}
	results := patcher(t, r, ShimSpec(), WithJobs(4)).Run(context.Background(), tags, true, nil)
	got := countActions(results)
	if got[ActionPush] != 2 || got[ActionSkipped] != 2 {
		t.Fatalf("%v: %+v", got, results)
	}
	for _, res := range results {
		if res.Action == ActionSkipped && !strings.Contains(res.Error, "an earlier result") {
			t.Errorf("%+v", res)
		}
	}
}

func countActions(res []Result) map[Action]int {
	m := map[Action]int{}
	for _, r := range res {
		m[r.Action]++
	}
	return m
}

// limiter is a registry allowing rate requests a second (burst at once),
// once on, answering others 429 with the Retry-After retryAfter gives.
func limiter(rate float64, burst int, retryAfter func() string) (h func(w http.ResponseWriter, r *http.Request, next http.Handler), on *atomic.Bool, limited *atomic.Int64) {
	var mu sync.Mutex
	tokens, last := float64(burst), time.Now()
	on, limited = new(atomic.Bool), new(atomic.Int64)
	return func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if !on.Load() {
			next.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		now := time.Now()
		tokens = min(float64(burst), tokens+now.Sub(last).Seconds()*rate)
		last = now
		ok := tokens >= 1
		if ok {
			tokens--
		}
		mu.Unlock()
		if !ok {
			limited.Add(1)
			if ra := retryAfter(); ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			http.Error(w, `{"errors":[{"code":"TOOMANYREQUESTS","message":"rate limit"}]}`, http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	}, on, limited
}

// Behind a registry that allows a few requests a second, eight jobs at
// once patch every tag: one gate for all of them, Retry-After honoured
// (seconds, or a date), and a backoff when it says nothing.
func TestRateLimitedRegistry(t *testing.T) {
	for what, ra := range map[string]func() string{
		"seconds": func() string { return "1" },
		"a date":  func() string { return time.Now().Add(time.Second).UTC().Format(http.TimeFormat) },
		"nothing": func() string { return "" },
	} {
		t.Run(what, func(t *testing.T) {
			t.Parallel() // three registries, three transports: mostly waiting
			h, on, limited := limiter(10, 3, ra)
			r := registryBehind(t, h)
			var srcs []name.Tag
			for i := range 8 {
				ref := fmt.Sprintf("ml/base:v%d", i)
				r.push(t, ref, image(t, "amd64", types.OCIManifestSchema1, nil, []string{"x"}))
				srcs = append(srcs, r.tag(t, ref))
			}
			on.Store(true)
			tr := NewTransport(TransportOptions{})
			p, err := New(ShimSpec(), WithRegistry(tr, nil), WithRemoteOptions(noRetries), WithJobs(8))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			res := p.Run(ctx, srcs, true, nil)
			if got := countActions(res); got[ActionPush] != len(srcs) {
				t.Fatalf("%v after %s and %d 429s: %+v", got, time.Since(start), limited.Load(), res)
			}
			if limited.Load() == 0 {
				t.Fatal("the registry never limited: the test tests nothing")
			}
			t.Logf("%d tags in %s, %d answers 429", len(srcs), time.Since(start).Round(time.Millisecond), limited.Load())
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		" 120 ":                         2 * time.Minute,
		"-1":                            0,
		"soon":                          0,
		"Wed, 01 Jan 2025 00:00:30 GMT": 30 * time.Second,
		"Tue, 31 Dec 2024 23:59:00 GMT": 0,
		strconv.Itoa(1 << 40):           24 * time.Hour,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("%q: %s, want %s", v, got, want)
		}
	}
	// A wait past the caller's deadline is not begun: the request fails
	// at once, saying why.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v2/x/manifests/v1", nil)
	start := time.Now()
	_, err := NewTransport(TransportOptions{}).RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), "asks to wait 1h0m0s, past this run's deadline") || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
}

// An image without history gets one history entry per layer (the base's,
// then the patch's): the entries that are not empty_layer are the layers.
func TestImageWithoutHistory(t *testing.T) {
	r := newRegistry(t)
	img, _ := random.Image(512, 2)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.History = "linux", "amd64", nil
	img, _ = mutate.ConfigFile(img, cf)
	r.push(t, "ml/bare:v1", img)
	if res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/bare:v1")); res.Action != ActionPush {
		t.Fatalf("%+v", res)
	}
	got, _ := remote.Image(r.tag(t, "ml/bare:v1-"+shimSuffix))
	gc, _ := got.ConfigFile()
	ls, _ := got.Layers()
	nonEmpty := 0
	for _, h := range gc.History {
		if !h.EmptyLayer {
			nonEmpty++
		}
	}
	if nonEmpty != len(ls) || len(ls) != 3 || !strings.HasPrefix(gc.History[2].CreatedBy, "imagepatch ") {
		t.Fatalf("%d layers, history %+v", len(ls), gc.History)
	}
	// The result is still known for what it is: a second run skips it,
	// and an upgrade starts from its base.
	if res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/bare:v1-"+shimSuffix)); res.Action != ActionSkipped {
		t.Fatalf("the result: %+v", res)
	}
	next := ShimSpec()
	next.Version += ".1"
	if res := patcher(t, r, next).Apply(context.Background(), r.tag(t, "ml/bare:v1-"+shimSuffix)); !res.Upgraded {
		t.Fatalf("an upgrade of the result: %+v", res)
	}
}

// A Docker manifest list stays one: no annotations, no artifactType (its
// schema has neither), its entries' own fields kept; its result is still
// known for what it is (by its entries' labels) and upgraded from its base.
func TestDockerManifestList(t *testing.T) {
	r := newRegistry(t)
	// As docker and buildah write one: no artifactType in its entries.
	var entries []string
	for _, arch := range []string{"amd64", "arm64"} {
		img := image(t, arch, types.DockerManifestSchema2, nil, []string{"x"})
		d, _ := img.Digest()
		size, _ := img.Size()
		if err := remote.Write(r.tag(t, "ml/list").Context().Digest(d.String()), img); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, fmt.Sprintf(`{"mediaType":%q,"size":%d,"digest":%q,"platform":{"architecture":%q,"os":"linux"}}`, types.DockerManifestSchema2, size, d, arch))
	}
	list := rawManifest{mt: types.DockerManifestList, body: []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"manifests":[%s]}`, types.DockerManifestList, strings.Join(entries, ",")))}
	if err := remote.Put(r.tag(t, "ml/list:v1"), list); err != nil {
		t.Fatal(err)
	}
	listDigest, _ := remote.Head(r.tag(t, "ml/list:v1"))
	res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/list:v1"))
	if res.Action != ActionPush {
		t.Fatalf("%+v", res)
	}
	desc, err := remote.Get(r.tag(t, "ml/list:v1-"+shimSuffix), r.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	json.Unmarshal(desc.Manifest, &raw)
	if desc.MediaType != types.DockerManifestList || raw["annotations"] != nil || strings.Contains(string(desc.Manifest), "artifactType") {
		t.Fatalf("%s: %s", desc.MediaType, desc.Manifest)
	}
	if again := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/list:v1")); again.Action != ActionUnchanged {
		t.Fatalf("again: %+v", again)
	}
	if self := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/list:v1-"+shimSuffix)); self.Action != ActionSkipped {
		t.Fatalf("the result itself: %+v", self)
	}
	next := ShimSpec()
	next.Version += ".1"
	up := patcher(t, r, next).Apply(context.Background(), r.tag(t, "ml/list:v1-"+shimSuffix))
	if !up.Upgraded || up.Base != r.host+"/ml/list@"+listDigest.Digest.String() || up.Destination != r.host+"/ml/list:v1-oomguard-init."+next.Version {
		t.Fatalf("the upgrade: %+v", up)
	}
}
