//go:build e2e

package registrytest

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Every flavour the image tests use starts, takes an image through the
// proxy and gives it back; with basic auth nothing is served without the
// password; a planted blob is served by its size, never written.
func TestE2EFlavours(t *testing.T) {
	v3, err := DistributionV3()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"debian-2.8", Options{}},
		{"debian-2.8-tls-auth", Options{TLS: true, User: "ci", Password: "s3cret"}},
		{"distribution-v3", Options{Binary: v3}},
		{"distribution-v3-tls-auth", Options{Binary: v3, TLS: true, User: "ci", Password: "s3cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := StartWith(t.TempDir(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			opts := []name.Option{}
			if !tc.o.TLS {
				opts = append(opts, name.Insecure)
			}
			tag, _ := name.NewTag(r.Host+"/ml/base:v1", opts...)
			img, _ := random.Image(1024, 2)
			if err := remote.Write(tag, img, r.RemoteOptions()...); err != nil {
				t.Fatal(err)
			}
			d, _ := img.Digest()
			got, err := remote.Head(tag, r.RemoteOptions()...)
			if err != nil || got.Digest != d {
				t.Fatalf("head: %v %v, want %s", got, err, d)
			}
			if tc.o.User != "" {
				if _, err := remote.Get(tag, remote.WithTransport(r.Transport())); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
					t.Fatalf("anonymous: %v, want UNAUTHORIZED", err)
				}
			}

			// A layer of 3 GiB, planted: served by HEAD at its size.
			const size = 3 << 30
			digest := ZeroDigest(size)
			if err := r.PlantBlob("ml/base", size, digest); err != nil {
				t.Fatal(err)
			}
			h, _ := v1.NewHash(digest)
			l, err := remote.Layer(tag.Context().Digest(digest), r.RemoteOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := l.Size(); err != nil || n != size {
				t.Fatalf("planted blob: %d %v", n, err)
			}
			out, err := exec.Command("du", "-sk", filepath.Join(r.Dir, "data")).Output()
			if f := strings.Fields(string(out)); err != nil || len(f) == 0 || len(f[0]) > 5 {
				t.Fatalf("storage with a planted %d-byte blob %s: %s KiB on disk (%v)", size, h, out, err)
			}
		})
	}
}

// RateLimit answers 429 with Retry-After past its rate.
func TestE2ERateLimit(t *testing.T) {
	r, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	r.RateLimit(5, 1)
	ok, limited := 0, 0
	start := time.Now()
	for range 20 {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
			}
		}
	}
	if el := time.Since(start); ok > 5+int(el.Seconds()*5)+1 || limited == 0 {
		t.Fatalf("%d allowed, %d limited in %s", ok, limited, el)
	}
	r.RateLimit(0, 0)
	if n := r.Count("GET", "/v2/"); n != 20 {
		t.Fatalf("%d recorded", n)
	}
}
