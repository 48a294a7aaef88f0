package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/oomguard/oomguard/imagepatch"
)

// fakeResolver patches registry.example/base/* to @sha256:1…, by tag or digest.
type fakeResolver struct {
	mu      sync.Mutex
	state   imagepatch.State
	patched string // override
	asked   []string
}

const patchedDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func (f *fakeResolver) Resolve(_ context.Context, ref name.Reference) imagepatch.Resolution {
	f.mu.Lock()
	f.asked = append(f.asked, ref.String())
	f.mu.Unlock()
	res := imagepatch.Resolution{Source: ref.String(), State: f.state}
	if f.state == imagepatch.StatePatched || f.state == imagepatch.StateCached {
		res.Patched = ref.Context().Digest(patchedDigest).String()
		if f.patched != "" {
			res.Patched = f.patched
		}
	}
	return res
}

func (f *fakeResolver) Cached(ref name.Reference) (imagepatch.Resolution, bool) {
	return imagepatch.Resolution{State: imagepatch.StateCached, Patched: ref.Context().Digest(patchedDigest).String()}, f.state == imagepatch.StateCached
}

func handler(r Resolver) *Handler {
	return New(Config{Images: []string{"registry.example/base/*"}, Skip: []string{"oomguard"}, Deadline: time.Second,
		Prefix: []string{"/.oomguard/oomguard-init", "--"}}, r, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics())
}

func reviewOf(t *testing.T, ns, op, sub string, obj, old string) []byte {
	t.Helper()
	req := map[string]any{"uid": "u-1", "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"}, "namespace": ns,
		"operation": op, "subResource": sub, "object": json.RawMessage(obj)}
	if old != "" {
		req["oldObject"] = json.RawMessage(old)
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	return b
}

// answer is a review's response: its patch as text.
func answer(t *testing.T, h *Handler, body []byte) (patch string, warnings []string, result string) {
	t.Helper()
	out, result, err := h.Review(context.Background(), body)
	if err != nil {
		t.Fatal(err)
	}
	var rv review
	if err := json.Unmarshal(out, &rv); err != nil || rv.Response == nil || rv.Response.UID != "u-1" || !rv.Response.Allowed {
		t.Fatalf("response %s: %v", out, err)
	}
	return string(rv.Response.Patch), rv.Response.Warnings, result
}

const base = "registry.example/base/ubuntu"

func TestMutate(t *testing.T) {
	pd := base + "@" + patchedDigest
	for _, tc := range []struct {
		name, ns, op, sub, obj, old string
		state                       imagepatch.State
		want, result                string
	}{
		{"every kind of container, by tag and by digest", "ml", "CREATE", "",
			`{"metadata":{"generateName":"web-"},"spec":{"initContainers":[{"name":"init","image":"` + base + `:20.04"}],"containers":[{"name":"main","image":"` + base + `@sha256:2222222222222222222222222222222222222222222222222222222222222222"},{"name":"side","image":"docker.io/library/nginx:1"}]}}`, "",
			imagepatch.StatePatched,
			`[{"op":"replace","path":"/spec/initContainers/0/image","value":"` + pd + `"},{"op":"replace","path":"/spec/containers/0/image","value":"` + pd + `"},` +
				`{"op":"add","path":"/metadata/annotations","value":{"oomguard.io/original-images":"{\"init\":\"` + base + `:20.04\",\"main\":\"` + base + `@sha256:2222222222222222222222222222222222222222222222222222222222222222\"}"}}]`, "mutated"},
		{"a command gets the shim in front", "ml", "CREATE", "",
			`{"metadata":{"name":"p","annotations":{"a":"b"}},"spec":{"containers":[{"name":"main","image":"` + base + `:20.04","command":["/bin/sh","-c","run"]}]}}`, "",
			imagepatch.StateCached,
			`[{"op":"replace","path":"/spec/containers/0/image","value":"` + pd + `"},{"op":"replace","path":"/spec/containers/0/command","value":["/.oomguard/oomguard-init","--","/bin/sh","-c","run"]},` +
				`{"op":"add","path":"/metadata/annotations/oomguard.io~1original-images","value":"{\"main\":\"` + base + `:20.04\"}"}]`, "mutated"},
		{"a command that starts the shim already", "ml", "CREATE", "",
			`{"metadata":{"name":"p","annotations":{}},"spec":{"containers":[{"name":"main","image":"` + base + `:20.04","command":["/.oomguard/oomguard-init","--","x"]}]}}`, "",
			imagepatch.StateCached,
			`[{"op":"replace","path":"/spec/containers/0/image","value":"` + pd + `"},{"op":"add","path":"/metadata/annotations/oomguard.io~1original-images","value":"{\"main\":\"` + base + `:20.04\"}"}]`, "mutated"},
		{"an ephemeral container added: only it, no annotation", "ml", "UPDATE", "ephemeralcontainers",
			`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"main","image":"` + base + `:1"}],"ephemeralContainers":[{"name":"dbg-1","image":"` + base + `:1"},{"name":"dbg-2","image":"` + base + `:2"}]}}`,
			`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"main","image":"` + base + `:1"}],"ephemeralContainers":[{"name":"dbg-1","image":"` + base + `:1"}]}}`,
			imagepatch.StatePatched, `[{"op":"replace","path":"/spec/ephemeralContainers/1/image","value":"` + pd + `"}]`, "mutated"},
		{"kube-system", "kube-system", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"` + base + `:1"}]}}`, "", imagepatch.StatePatched, "", "skipped"},
		{"its own namespace", "oomguard", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"` + base + `:1"}]}}`, "", imagepatch.StatePatched, "", "skipped"},
		{"opted out", "ml", "CREATE", "", `{"metadata":{"annotations":{"oomguard.io/patch-images":"false"}},"spec":{"containers":[{"name":"main","image":"` + base + `:1"}]}}`, "", imagepatch.StatePatched, "", "skipped"},
		{"an update", "ml", "UPDATE", "", `{"spec":{"containers":[{"name":"main","image":"` + base + `:1"}]}}`, "", imagepatch.StatePatched, "", "skipped"},
		{"not selected", "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"registry.example/other/x:1"}]}}`, "", imagepatch.StatePatched, "", "unchanged"},
		{"not patched in time", "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"` + base + `:1"}]}}`, "", imagepatch.StatePending, "", "unchanged"},
		{"a limit on the work reached", "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"` + base + `:1"}]}}`, "", imagepatch.StateThrottled, "", "unchanged"},
		{"failed", "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"` + base + `:1"}]}}`, "", imagepatch.StateFailed, "", "unchanged"},
		{"an unparsable image", "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"` + base + `:a b"}]}}`, "", imagepatch.StatePatched, "", "unchanged"},
		{"not a pod", "ml", "CREATE", "", `[1,2]`, "", imagepatch.StatePatched, "", "skipped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handler(&fakeResolver{state: tc.state})
			patch, warnings, result := answer(t, h, reviewOf(t, tc.ns, tc.op, tc.sub, tc.obj, tc.old))
			if patch != tc.want || result != tc.result {
				t.Fatalf("patch %s (%s)\nwant  %s (%s)", patch, result, tc.want, tc.result)
			}
			// Every image selected but not run patched is said to be so, a failure too.
			warns := tc.state == imagepatch.StatePending || tc.state == imagepatch.StateThrottled || (tc.state == imagepatch.StateFailed && tc.result == "unchanged")
			if warns != (len(warnings) > 0) {
				t.Fatalf("warnings %q", warnings)
			}
		})
	}
}

// Only to an image of the same repository: a resolver's answer elsewhere is refused.
func TestOnlyTheSameRepository(t *testing.T) {
	h := handler(&fakeResolver{state: imagepatch.StatePatched, patched: "evil.example/x@" + patchedDigest})
	patch, _, result := answer(t, h, reviewOf(t, "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"`+base+`:1"}]}}`, ""))
	if patch != "" || result != "unchanged" {
		t.Fatalf("patch %s (%s)", patch, result)
	}
}

// A dry run writes nothing: only a cached answer is used.
func TestDryRun(t *testing.T) {
	for state, want := range map[imagepatch.State]string{imagepatch.StateCached: "mutated", imagepatch.StatePatched: "unchanged"} {
		f := &fakeResolver{state: state}
		body := strings.Replace(string(reviewOf(t, "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"`+base+`:1"}]}}`, "")), `"uid":"u-1"`, `"uid":"u-1","dryRun":true`, 1)
		if _, _, result := answer(t, handler(f), []byte(body)); result != want || len(f.asked) != 0 {
			t.Fatalf("%s: %s, asked %v", state, result, f.asked)
		}
	}
}

func TestMalformed(t *testing.T) {
	h := handler(&fakeResolver{})
	for _, body := range []string{"", "{", `{"request":null}`, `{"request":{"uid":""}}`} {
		if _, _, err := h.Review(context.Background(), []byte(body)); err == nil {
			t.Errorf("%q: no error", body)
		}
	}
}

func FuzzReview(f *testing.F) {
	f.Add([]byte(`{"request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE","namespace":"ml","object":{"spec":{"containers":[{"name":"m","image":"registry.example/base/x:1","command":["a"]}]}}}}`))
	f.Add([]byte(`{"request":{"uid":"u","kind":{"kind":"Pod"},"operation":"UPDATE","subResource":"ephemeralcontainers","namespace":"ml","object":{"spec":{"ephemeralContainers":[{"name":"d","image":"registry.example/base/x@sha256:1111111111111111111111111111111111111111111111111111111111111111"}]}},"oldObject":5}}`))
	h := handler(&fakeResolver{state: imagepatch.StatePatched})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, _, err := h.Review(context.Background(), b)
		if err != nil {
			return
		}
		var rv review
		if err := json.Unmarshal(out, &rv); err != nil || rv.Response == nil || !rv.Response.Allowed {
			t.Fatalf("%q: response %s", b, out)
		}
		if len(rv.Response.Patch) > 0 {
			var ops []op
			if err := json.Unmarshal(rv.Response.Patch, &ops); err != nil {
				t.Fatalf("patch %s: %v", rv.Response.Patch, err)
			}
			for _, o := range ops {
				if !strings.HasPrefix(o.Path, "/spec/") && !strings.HasPrefix(o.Path, "/metadata/annotations") {
					t.Fatalf("a patch outside the containers and annotations: %s", rv.Response.Patch)
				}
			}
		}
	})
}

// Reviews in flight hold at most MaxInFlight bytes: past it one is refused
// at once, unread (429: the API server admits the pod as its
// failurePolicy says), while a small one still fits.
func TestReviewBytesInFlight(t *testing.T) {
	h := handler(&fakeResolver{state: imagepatch.StateCached})
	serve := func(size int64, body io.Reader) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/mutate", body)
		req.ContentLength = size
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	var held []*io.PipeWriter
	var wg sync.WaitGroup
	for range MaxInFlight / MaxReview {
		pr, pw := io.Pipe()
		held = append(held, pw)
		wg.Add(1)
		go func() { defer wg.Done(); serve(MaxReview, pr) }()
	}
	// Until each held review has taken its share.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		n := h.inFlight
		h.mu.Unlock()
		if n == int64(len(held))*MaxReview {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes in flight, want %d", n, len(held)*MaxReview)
		}
	}
	for _, tc := range []struct {
		name string
		size int64
		want int
	}{
		{"another of the largest", MaxReview, http.StatusTooManyRequests},
		{"one of unknown size", -1, http.StatusTooManyRequests},
		{"an ordinary pod's", 0, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := reviewOf(t, "ml", "CREATE", "", `{"spec":{"containers":[{"name":"main","image":"`+base+`:1"}]}}`, "")
			size := tc.size
			if size == 0 {
				size = int64(len(body))
			}
			if rec := serve(size, bytes.NewReader(body)); rec.Code != tc.want {
				t.Fatalf("%d: %s, want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
	for _, pw := range held {
		pw.Close()
	}
	wg.Wait()
	if h.inFlight != 0 {
		t.Fatalf("%d bytes still counted in flight after every review ended", h.inFlight)
	}
}
