//go:build e2e

package imagepatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/testbin"
)

func startRegistry(t *testing.T) *registrytest.Registry {
	t.Helper()
	r, err := registrytest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// The built imagepatch, once per test binary (its directory outlives the tests).
var (
	cliOnce sync.Once
	cliBin  string
	cliErr  error
)

func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "imagepatch-cli-")
		if err != nil {
			cliErr = err
			return
		}
		cliBin, cliErr = testbin.Program(dir, "imagepatch")
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliBin
}

// cli runs the imagepatch binary with --json and returns its exit code and results.
func cli(t *testing.T, bin string, args ...string) (int, []Result, string) {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--json")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var res []Result
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("--json output: %v\n%s", err, out.String())
		}
	}
	return code, res, errb.String()
}

func actions(res []Result) map[Action]int {
	m := map[Action]int{}
	for _, r := range res {
		m[r.Action]++
	}
	return m
}

// seed pushes n tags sharing three layers, each with a config of its own.
func seed(t *testing.T, host, repo string, n int) {
	t.Helper()
	base := image(t, "amd64", types.OCIManifestSchema1, []string{"/entrypoint"}, []string{"serve"})
	for i := range n {
		cf, _ := base.ConfigFile()
		cf = cf.DeepCopy()
		cf.Config.Labels = map[string]string{"build": fmt.Sprint(i)}
		img, _ := mutate.ConfigFile(base, cf)
		tag, _ := name.NewTag(fmt.Sprintf("%s/%s:v%03d", host, repo, i))
		if err := remote.Write(tag, img); err != nil {
			t.Fatal(err)
		}
	}
}

func TestE2ERegistry(t *testing.T) {
	reg := startRegistry(t)
	bin := buildCLI(t)
	const n = 300
	seed(t, reg.Host, "ml/base", n)
	repo := reg.Host + "/ml/base"
	reg.Reset()

	code, res, stderr := cli(t, bin, "plan", "--repo", repo, "--tags", "v*")
	if code != 0 || len(res) != n || actions(res)[ActionPush] != n {
		t.Fatalf("plan: exit %d, %v, %s", code, actions(res), stderr)
	}
	if reg.Count("PUT", "/manifests/") != 0 {
		t.Fatal("plan wrote to the registry")
	}

	// Fail some requests: 500 for good on manifests of tags ending in 7,
	// one 429 then success for tags ending in 3.
	var throttled sync.Map
	var throttles atomic.Int64
	reg.Inject(func(r *http.Request) int {
		if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/manifests/") {
			return 0
		}
		switch {
		case strings.Contains(r.URL.Path, "7-oomguard-init"):
			return http.StatusInternalServerError
		case strings.Contains(r.URL.Path, "3-oomguard-init"):
			if _, again := throttled.LoadOrStore(r.URL.Path, true); !again {
				throttles.Add(1)
				return http.StatusTooManyRequests
			}
		}
		return 0
	})
	reg.Reset()
	code, res, _ = cli(t, bin, "apply", "--repo", repo, "--tags", "v*", "--retries", "2")
	failed := 0
	for _, r := range res {
		if r.Action == ActionFailed {
			failed++
			if !strings.HasSuffix(r.Source, "7") || !strings.Contains(r.Error, "injected failure") {
				t.Errorf("unexpected failure %+v", r)
			}
		}
	}
	if code != 1 || failed != n/10 || actions(res)[ActionPush] != n-n/10 || throttles.Load() != n/10 {
		t.Fatalf("apply with failures: exit %d, %v, %d throttled", code, actions(res), throttles.Load())
	}
	// The patch layer went up once; no base layer came down.
	if got := reg.Count("POST", "/blobs/uploads/"); got > n+1 {
		t.Errorf("%d uploads for %d tags", got, n)
	}
	for _, q := range reg.Requests() {
		if q.Method == http.MethodGet && strings.Contains(q.Path, "/blobs/") && q.Out > 64<<10 {
			t.Errorf("downloaded a large blob: %+v", q)
		}
	}

	reg.Inject(nil)
	code, res, _ = cli(t, bin, "apply", "--repo", repo, "--tags", "v*")
	if a := actions(res); code != 0 || a[ActionPush] != n/10 || a[ActionUnchanged] != n-n/10 {
		t.Fatalf("re-run: exit %d, %v", code, a)
	}
	reg.Reset()
	code, res, _ = cli(t, bin, "apply", "--repo", repo, "--tags", "v*")
	if code != 0 || actions(res)[ActionUnchanged] != n || reg.Count("PUT", "") != 0 || reg.Count("POST", "") != 0 {
		t.Fatalf("re-apply pushed: exit %d, %v, %d writes", code, actions(res), reg.Count("PUT", "")+reg.Count("POST", ""))
	}

	// An upgrade from a patched tag has one patch layer.
	specFile := filepath.Join(t.TempDir(), "v2.toml")
	next := ShimSpec().Version + "0"
	os.WriteFile(specFile, bytes.Replace(ShimSpecTOML(), []byte(`version = "`+ShimSpec().Version+`"`), []byte(`version = "`+next+`"`), 1), 0o644)
	code, res, stderr = cli(t, bin, "apply", "--spec", specFile, repo+":v000-"+shimSuffix)
	if code != 0 || len(res) != 1 || !res[0].Upgraded || !strings.HasSuffix(res[0].Destination, ":v000-oomguard-init."+next) {
		t.Fatalf("upgrade: exit %d %+v %s", code, res, stderr)
	}
	up, _ := remote.Image(mustTag(t, repo+":v000-oomguard-init."+next))
	if ls, _ := up.Layers(); len(ls) != 4 {
		t.Fatalf("upgrade has %d layers, want 3 + 1", len(ls))
	}

	// A different image already at a destination: refused, untouched.
	seed(t, reg.Host, "ml/other", 1)
	other, _ := remote.Image(mustTag(t, reg.Host+"/ml/other:v000"))
	squatter := mustTag(t, reg.Host+"/ml/other:v000-"+shimSuffix)
	if err := remote.Write(squatter, mutate.MediaType(empty.Image, types.OCIManifestSchema1)); err != nil {
		t.Fatal(err)
	}
	before, _ := remote.Head(squatter)
	code, res, _ = cli(t, bin, "apply", reg.Host+"/ml/other:v000")
	if after, _ := remote.Head(squatter); code != 1 || res[0].Action != ActionRefused || after.Digest != before.Digest {
		t.Fatalf("squatted tag: exit %d %+v", code, res)
	}
	_ = other

	// resolve: the patched reference, patching on demand.
	out, err := exec.Command(bin, "resolve", reg.Host+"/ml/base:v001").Output()
	if err != nil || !strings.Contains(string(out), "/ml/base@sha256:") {
		t.Fatalf("resolve: %v %s", err, out)
	}
	seed(t, reg.Host, "ml/fresh", 1)
	out, err = exec.Command(bin, "resolve", reg.Host+"/ml/fresh:v000").Output()
	if err != nil {
		t.Fatalf("resolve on demand: %v", err)
	}
	if _, err := remote.Head(mustTag(t, reg.Host+"/ml/fresh:v000-"+shimSuffix)); err != nil {
		t.Fatalf("resolve did not push the patched tag (%s): %v", out, err)
	}

	// Bad inputs: usage errors exit 2 with a clear message.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"apply", "--spec", "/nonexistent.toml", repo + ":v000"}, 2, "nonexistent.toml"},
		{[]string{"apply", "--tags", "v*"}, 2, "give --repo"},
		{[]string{"apply"}, 2, "no targets"},
		{[]string{"apply", repo + "@sha256:" + strings.Repeat("0", 64)}, 2, "names a digest"},
		{[]string{"apply", "--tag-template", "{{.Tag", repo + ":v000"}, 2, "tag template"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"apply", "127.0.0.1:1/ml/base:v1"}, 1, "connection refused"},
	} {
		cmd := exec.Command(bin, tc.args...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		cmd.Stdout = &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, output %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

func TestE2EIndex(t *testing.T) {
	reg := startRegistry(t)
	bin := buildCLI(t)
	idx := initIndex(t)
	if err := remote.WriteIndex(mustTag(t, reg.Host+"/ml/multi:v1"), idx); err != nil {
		t.Fatal(err)
	}
	code, res, stderr := cli(t, bin, "apply", reg.Host+"/ml/multi:v1")
	if code != 0 || res[0].Action != ActionPush {
		t.Fatalf("exit %d %+v %s", code, res, stderr)
	}
	got, err := remote.Index(mustTag(t, reg.Host+"/ml/multi:v1-"+shimSuffix))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := got.IndexManifest()
	if len(im.Manifests) != 2 {
		t.Fatalf("%d entries", len(im.Manifests))
	}
	if code, res, _ := cli(t, bin, "apply", reg.Host+"/ml/multi:v1"); code != 0 || res[0].Action != ActionUnchanged {
		t.Fatalf("re-apply: %d %+v", code, res)
	}
}

// The patched image, unpacked as a runc bundle, boots through the shim:
// PID 1 is the image's own init and it has the shim's score.
func TestE2EPatchedImageBoots(t *testing.T) {
	if err := runcbundle.Available(); err != nil {
		t.Fatal(err)
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the test image is amd64")
	}
	reg := startRegistry(t)
	init := "#!/bin/sh\necho pid=$$ score=$(cat /proc/self/oom_score_adj) args=\"$*\"\n"
	img, err := runcbundle.BusyboxImage(map[string]runcbundle.ImageFile{"/sbin/init": {Data: []byte(init), Mode: 0o755}}, []string{"/sbin/init", "--system"})
	if err != nil {
		t.Fatal(err)
	}
	src := mustTag(t, reg.Host+"/ml/vm:v1")
	if err := remote.Write(src, img); err != nil {
		t.Fatal(err)
	}
	p, _ := New(ShimSpec())
	if res := p.Apply(context.Background(), src); res.Action != ActionPush {
		t.Fatalf("%+v", res)
	}
	patched, err := remote.Image(mustTag(t, reg.Host+"/ml/vm:v1-"+shimSuffix))
	if err != nil {
		t.Fatal(err)
	}
	b, err := runcbundle.New(filepath.Join(t.TempDir(), "vm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.UnpackImage(patched); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := b.Run(ctx, "imagepatch-e2e")
	if err != nil || out.ExitCode != 0 || strings.TrimSpace(out.Stdout) != "pid=1 score=900 args=--system" {
		t.Fatalf("%v exit %d stdout %q stderr %q", err, out.ExitCode, out.Stdout, out.Stderr)
	}
}

// The shims imagepatch embeds are what make build makes now.
func TestE2EEmbeddedShimsAreFresh(t *testing.T) {
	for arch, embedded := range map[string][]byte{"amd64": shimAMD64, "arm64": shimARM64} {
		out, err := testbin.Build(t.TempDir(), "shim", "./cmd/oomguard-init", "GOOS=linux", "GOARCH="+arch)
		if err != nil {
			t.Fatal(err)
		}
		fresh, _ := os.ReadFile(out)
		if !bytes.Equal(fresh, embedded) {
			t.Errorf("imagepatch/shim/oomguard-init-linux-%s is stale: run make shims and bump the version in imagepatch/shim.toml", arch)
		}
	}
}

func mustTag(t *testing.T, ref string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// The reported attack, as a user runs it: eight different images, one
// destination tag, eight jobs. Nothing is pushed; all eight are refused.
func TestE2EOneDestinationManySources(t *testing.T) {
	reg := startRegistry(t)
	bin := buildCLI(t)
	seed(t, reg.Host, "ml/dup", 8)
	reg.Reset()
	code, res, stderr := cli(t, bin, "apply", "--repo", reg.Host+"/ml/dup", "--tag-template", "{{.Patch}}", "--jobs", "8")
	if code != 1 || actions(res)[ActionRefused] != 8 || actions(res)[ActionPush] != 0 {
		t.Fatalf("exit %d, %v, stderr %s", code, actions(res), stderr)
	}
	if n := reg.Count("PUT", "/manifests/"); n != 0 {
		t.Fatalf("%d manifests written", n)
	}
}

// A registry has no conditional write: another writer (a second run, a
// second webhook replica) may fill a destination between this run's plan and
// its push, or during it. Then this run says so, and never reports success
// for a tag that holds someone else's content.
func TestE2EAnotherWriterWins(t *testing.T) {
	for _, tc := range []struct {
		name string
		head int // the other writer writes as this run's HEAD of the destination number head comes
		want string
		own  bool
	}{
		// HEADs of the destination: 1 just before the push (an apply's
		// plan does not look: that look would be older), 2 just after it.
		{"between plan and push", 1, "already holds", false},
		{"during the push", 2, "another writer pushed it at the same time", false},
		{"between plan and push, own uploads", 1, "already holds", true},
		{"during the push, own uploads", 2, "another writer pushed it at the same time", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := startRegistry(t)
			seed(t, reg.Host, "ml/base", 1)
			src := mustTag(t, reg.Host+"/ml/base:v000")
			// Either way of uploading the config: go-containerregistry's
			// writer (no WithRegistry), or the patcher's own.
			p, err := New(ShimSpec())
			if tc.own {
				p, err = New(ShimSpec(), WithRegistry(remote.DefaultTransport, nil))
			}
			if err != nil {
				t.Fatal(err)
			}
			dst, _ := p.DestinationTag(src)
			other := image(t, "amd64", types.OCIManifestSchema1, []string{"/theirs"}, nil)
			otherDigest, _ := other.Digest()
			var heads atomic.Int64
			reg.Inject(func(r *http.Request) int {
				if r.Method != http.MethodHead || !strings.HasSuffix(r.URL.Path, "/manifests/"+dst.TagStr()) {
					return 0
				}
				if heads.Add(1) == int64(tc.head) {
					direct, _ := name.NewTag(reg.Direct + "/ml/base:" + dst.TagStr())
					if err := remote.Write(direct, other); err != nil {
						t.Errorf("the other writer: %v", err)
					}
				}
				return 0
			})
			res := p.Apply(context.Background(), src)
			reg.Inject(nil)
			if res.Action != ActionRefused || !strings.Contains(res.Error, tc.want) {
				t.Fatalf("want refused with %q, got %+v", tc.want, res)
			}
			if n := heads.Load(); n != int64(tc.head) {
				t.Fatalf("the destination was looked at %d times, want %d", n, tc.head)
			}
			if d, err := remote.Head(dst); err != nil || d.Digest != otherDigest {
				t.Fatalf("the tag must hold the other writer's %s: %v %v", otherDigest, d, err)
			}
		})
	}
}

// A registry that rewrites a blob's link in place (Debian's
// docker-registry, distribution 2.8: truncated, then written) refuses a
// manifest that references the blob while another writer uploads it — two
// webhook replicas patching one source at once (CI saw it). The
// repository's links are emptied, as that writer leaves them, when the
// destination's manifest is written, and written back 150 ms later: the
// patcher tries again and pushes.
func TestE2ELinksRewritten(t *testing.T) {
	for _, tc := range []struct {
		name       string
		index, own bool
	}{
		{"an image", false, false},
		{"an image, own uploads", false, true},
		{"an index", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := startRegistry(t)
			src := mustTag(t, reg.Host+"/ml/base:v000")
			if tc.index {
				idx := initIndex(t)
				if err := remote.WriteIndex(src, idx); err != nil {
					t.Fatal(err)
				}
			} else {
				seed(t, reg.Host, "ml/base", 1)
			}
			var opts []Option
			if tc.own {
				opts = append(opts, WithRegistry(remote.DefaultTransport, nil))
			}
			p, err := New(ShimSpec(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			dst, _ := p.DestinationTag(src)
			repo := filepath.Join(reg.Dir, "data/docker/registry/v2/repositories/ml/base")
			var puts atomic.Int64
			var writeBack atomic.Pointer[time.Timer]
			t.Cleanup(func() {
				if w := writeBack.Load(); w != nil {
					w.Stop()
				}
			})
			reg.Inject(func(r *http.Request) int {
				if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/manifests/"+dst.TagStr()) && puts.Add(1) == 1 {
					writeBack.Store(time.AfterFunc(150*time.Millisecond, emptyLinks(t, repo)))
				}
				return 0
			})
			res := p.Apply(context.Background(), src)
			reg.Inject(nil)
			if res.Action != ActionPush {
				t.Fatalf("want pushed, got %+v", res)
			}
			if n := puts.Load(); n < 2 {
				t.Fatalf("the manifest was written %d times: the links were never emptied", n)
			}
			if d, err := remote.Head(dst); err != nil || d.Digest.String() != res.Digest {
				t.Fatalf("%s holds %v (%v), want %s", dst, d, err, res.Digest)
			}
		})
	}
}

// emptyLinks empties every link file under a registry's repository
// directory, as a writer of one leaves it between truncating and writing,
// and returns what writes them back.
func emptyLinks(t *testing.T, repo string) func() {
	saved := map[string][]byte{}
	err := filepath.WalkDir(repo, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "link" {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil {
			saved[path] = b
			err = os.Truncate(path, 0)
		}
		return err
	})
	if err != nil || len(saved) == 0 {
		t.Errorf("empty the links under %s: %d, %v", repo, len(saved), err)
	}
	return func() {
		for path, b := range saved {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Errorf("write back %s: %v", path, err)
			}
		}
	}
}

// requestKind names a registry request by what it does: the /v2/ ping, a
// manifest, a blob, an upload, a tag listing, with its method.
func requestKind(q registrytest.Request) string {
	switch p := q.Path; {
	case p == "/v2/":
		return "ping"
	case strings.Contains(p, "/manifests/"):
		return "manifest " + q.Method
	case strings.Contains(p, "/blobs/uploads/"):
		return "upload " + q.Method
	case strings.Contains(p, "/blobs/"):
		return "blob " + q.Method
	case strings.HasSuffix(p, "/tags/list"):
		return "tags " + q.Method
	}
	return q.Method + " " + q.Path
}

// What patching many tags of one repository with --jobs 8 costs. A tag:
// its manifest and config read, the destination looked at just before the
// push and just after it, the config uploaded (POST, then PUT with the
// body: distribution takes no single POST) and the manifest put: 7. A
// run: the pings, the tag listing and the patch layer (looked for and
// uploaded once). Issue 33: it was 10 a tag (the plan and the push each
// looked at the destination, and each config went up in four requests:
// HEAD, POST, PATCH, PUT).
func TestE2ERequestsPerTag(t *testing.T) {
	reg := startRegistry(t)
	bin := buildCLI(t)
	const n, perTag, perRun = 40, 7, 10
	seed(t, reg.Host, "ml/many", n)
	count := func(what string, perTag int) {
		t.Helper()
		reqs := reg.Requests()
		kinds := map[string]int{}
		for _, q := range reqs {
			kinds[requestKind(q)]++
		}
		if len(reqs) > perTag*n+perRun {
			t.Errorf("%s: %d requests for %d tags, %.2f a tag; want at most %d a tag and %d a run: %v", what, len(reqs), n, float64(len(reqs))/n, perTag, perRun, kinds)
		}
		t.Logf("%s: %d requests, %.2f a tag: %v", what, len(reqs), float64(len(reqs))/n, kinds)
	}
	reg.Reset()
	code, res, stderr := cli(t, bin, "apply", "--repo", reg.Host+"/ml/many", "--tag-regex", "^v[0-9]+$", "--jobs", "8")
	if code != 0 || actions(res)[ActionPush] != n {
		t.Fatalf("apply: exit %d, %v, %s", code, actions(res), stderr)
	}
	count("apply", perTag)
	// Again: the sources read, each destination looked at once, nothing written.
	reg.Reset()
	code, res, stderr = cli(t, bin, "apply", "--repo", reg.Host+"/ml/many", "--tag-regex", "^v[0-9]+$", "--jobs", "8")
	if code != 0 || actions(res)[ActionUnchanged] != n {
		t.Fatalf("re-apply: exit %d, %v, %s", code, actions(res), stderr)
	}
	count("re-apply", 3)
}
