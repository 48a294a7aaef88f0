package imagepatch

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// hostile is a registry that misbehaves as handle says, on /v2/ after the
// version check.
func hostile(t *testing.T, handle http.HandlerFunc) (host string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		handle(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func hostileTransport(host string) *Transport {
	tr := NewTransport(TransportOptions{RequestTimeout: time.Second, MaxBody: 1 << 20})
	tr.Allow(host)
	return tr
}

// Each request is bounded: a registry that never answers, or answers a byte
// a second, fails the tag within the request timeout.
func TestTransportDeadlines(t *testing.T) {
	for what, handle := range map[string]http.HandlerFunc{
		"never answers": func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
		"a byte a second": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			for i := 0; i < 60 && r.Context().Err() == nil; i++ {
				w.Write([]byte(" "))
				w.(http.Flusher).Flush()
				time.Sleep(time.Second)
			}
		},
	} {
		t.Run(what, func(t *testing.T) {
			host := hostile(t, handle)
			p, err := New(ShimSpec(), WithRemoteOptions(remote.WithTransport(hostileTransport(host)), remote.WithRetryBackoff(remote.Backoff{Steps: 1})))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := p.Plan(context.Background(), mustTagIn(t, host+"/ml/base:v1"))
			if r.Action != ActionFailed || time.Since(start) > 20*time.Second {
				t.Fatalf("%s after %s: %+v", r.Action, time.Since(start), r)
			}
		})
	}
}

// A listing is bounded: pages linked without end, tags without end, and a
// page of hundreds of megabytes all end in an error, quickly and small.
func TestListingBounds(t *testing.T) {
	defer func(n int) { maxPages = n }(maxPages)
	maxPages = 50
	var pages atomic.Int64
	page := func(w http.ResponseWriter, tags []string, next bool) {
		if next {
			w.Header().Set("Link", `</v2/ml/base/tags/list?n=1000&last=x>; rel="next"`)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"ml/base","tags":["%s"]}`, strings.Join(tags, `","`))
	}
	for what, tc := range map[string]struct {
		handle http.HandlerFunc
		want   string
	}{
		"the same page for ever": {func(w http.ResponseWriter, r *http.Request) {
			pages.Add(1)
			page(w, []string{"v1"}, true)
		}, "over 1 tags in 50 pages"},
		"new tags for ever": {func(w http.ResponseWriter, r *http.Request) {
			n := pages.Add(1)
			var tags []string
			for i := range 5000 {
				tags = append(tags, fmt.Sprintf("t%d-%d", n, i))
			}
			page(w, tags, true)
		}, "tags in"},
		"a page of 400 MB": {func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"name":"ml/base","tags":["`))
			chunk := []byte(strings.Repeat("a", 1<<20))
			for range 400 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}, "too large"},
	} {
		t.Run(what, func(t *testing.T) {
			pages.Store(0)
			host := hostile(t, tc.handle)
			repo, _ := name.NewRepository(host+"/ml/base", name.Insecure)
			done := make(chan error, 1)
			go func() {
				_, err := Selector{}.Tags(context.Background(), repo, remote.WithTransport(hostileTransport(host)))
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("want an error naming %q, got %v", tc.want, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the listing did not end")
			}
		})
	}
}

// A registry's token server is where imagepatch sends the registry's
// credentials: one that resolves to a private or loopback address other
// than the registry's own never gets them, whatever its name's spelling.
func TestCredentialsNeverGoToAPrivateTokenServer(t *testing.T) {
	var got atomic.Value
	token := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"token":"t"}`))
	}))
	defer token.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(token.URL, "http://"), ":")
	for _, realm := range []string{"localhost:" + port, "127.1:" + port} {
		t.Run(realm, func(t *testing.T) {
			got.Store("")
			reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="r"`, realm))
				w.WriteHeader(http.StatusUnauthorized)
			}))
			defer reg.Close()
			host := strings.TrimPrefix(reg.URL, "http://")
			tr := hostileTransport(host)
			p, err := New(ShimSpec(), WithRemoteOptions(remote.WithTransport(tr), remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
				remote.WithAuth(&authn.Basic{Username: "robot", Password: "s3cr3t"})))
			if err != nil {
				t.Fatal(err)
			}
			r := p.Plan(context.Background(), mustTagIn(t, host+"/ml/base:v1"))
			if s := got.Load().(string); s != "" {
				t.Fatalf("the credentials went to %s (%q); result %+v", realm, s, r)
			}
			if r.Action != ActionFailed {
				t.Fatalf("want a failure, got %+v", r)
			}
		})
	}
}

func TestTransportLetsTheRegistryItself(t *testing.T) {
	tr := NewTransport(TransportOptions{})
	tr.Allow("127.0.0.1:5000")
	if !tr.allowed("127.0.0.1:5000") || !tr.allowed("127.0.0.1") || tr.allowed("localhost:5000") {
		t.Fatal("the registries named are allowed, by host or host:port, and nothing else")
	}
	if err := publicOnly("tcp", "169.254.169.254:80", nil); err == nil {
		t.Fatal("the metadata service is link-local")
	}
	if err := publicOnly("tcp", "[::ffff:10.0.0.1]:443", nil); err == nil {
		t.Fatal("an IPv4-mapped private address is private")
	}
	if err := publicOnly("tcp", "8.8.8.8:443", nil); err != nil {
		t.Fatal(err)
	}

}

func mustTagIn(t *testing.T, ref string) name.Tag {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// The 429s of requests that were in flight together are one refusal: the
// host is closed for the first backoff (or what the registry asks), not for
// a backoff doubled by each of them; a 429 to a request sent after them
// doubles it.
func TestGateOneRefusalForRequestsInFlight(t *testing.T) {
	for _, after := range []time.Duration{0, 2 * time.Second} {
		var g gate
		var started []time.Time
		for range 8 {
			at, err := g.wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			started = append(started, at)
		}
		now := time.Now()
		first := max(after, backoffBase)
		for i, s := range started {
			if closed := g.limited(s, after, now); closed < first || closed > first+first/5 {
				t.Fatalf("Retry-After %s: the host closed for %s after the 429 of request %d of 8 in flight, want %s", after, closed, i+1, first)
			}
		}
		if closed := g.limited(now.Add(time.Millisecond), 0, now.Add(time.Millisecond)); closed < 2*backoffBase-time.Millisecond {
			t.Fatalf("Retry-After %s: a 429 after the refusal closed the host for %s, want the backoff doubled (%s)", after, closed, 2*backoffBase)
		}
	}
}

// A registry whose certificate no trusted CA signed fails saying how to
// trust its CA; with that CA given (--ca-file) it is trusted.
func TestUnknownAuthoritySaysWhatToDo(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/v2/", nil)
	_, err := NewTransport(TransportOptions{}).RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), "--ca-file") || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("an unknown CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	resp, err := NewTransport(TransportOptions{RootCAs: pool}).RoundTrip(req)
	if err != nil {
		t.Fatalf("with its CA: %v", err)
	}
	resp.Body.Close()
}
