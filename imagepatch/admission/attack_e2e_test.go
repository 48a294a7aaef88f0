//go:build e2e

package admission

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/testbin"
	"github.com/oomguard/oomguard/test/webhooktest"
)

// attackRig is Debian's registry behind a proxy that can hold requests,
// and the built webhook.
type attackRig struct {
	reg   *registrytest.Registry
	host  string       // the stalling proxy: what the webhook is given
	stall atomic.Value // func(*http.Request) bool
	free  chan struct{}
	once  sync.Once
	bin   string
}

func newAttackRig(t *testing.T) *attackRig {
	t.Helper()
	reg, err := registrytest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	bin, err := testbin.Program(t.TempDir(), "imagepatch")
	if err != nil {
		t.Fatal(err)
	}
	a := &attackRig{reg: reg, free: make(chan struct{}), bin: bin}
	a.stall.Store(func(*http.Request) bool { return false })
	target, _ := url.Parse("http://" + reg.Host)
	rp := httputil.NewSingleHostReverseProxy(target)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.stall.Load().(func(*http.Request) bool)(r) {
			select {
			case <-a.free:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Cleanup(a.release)
	a.host = ln.Addr().String()
	return a
}

func (a *attackRig) release() { a.once.Do(func() { close(a.free) }) }

// push writes img to the registry (directly) as repo:tag, returning it by digest through the proxy.
func (a *attackRig) push(t *testing.T, ref string, img v1.Image) name.Digest {
	t.Helper()
	tag, err := name.NewTag(a.reg.Host+"/"+ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return a.ref(t, ref).Context().Digest(d.String())
}

// ref is ref through the proxy.
func (a *attackRig) ref(t *testing.T, ref string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(a.host+"/"+ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

func (a *attackRig) webhook(t *testing.T, args ...string) *webhooktest.Webhook {
	t.Helper()
	return webhooktest.StartT(t, a.bin, append([]string{"--insecure", "--images", a.host + "/base/*"}, args...)...)
}

func bootable(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config.Cmd = "linux", "amd64", []string{"/sbin/init"}
	img, _ = mutate.ConfigFile(img, cf)
	return img
}

// reviewed is the webhook's answer to a pod running image: the image it
// sets (or "") and its warnings.
func reviewed(t *testing.T, w *webhooktest.Webhook, image string) (patched string, warnings []string, err error) {
	t.Helper()
	body := reviewOf(t, "ml", "CREATE", "", fmt.Sprintf(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"main","image":%q}]}}`, image), "")
	b, err := w.Review(context.Background(), body)
	if err != nil {
		return "", nil, err
	}
	var rv review
	if err := json.Unmarshal(b, &rv); err != nil || rv.Response == nil {
		return "", nil, fmt.Errorf("answer %s: %v", b, err)
	}
	var ops []op
	json.Unmarshal(rv.Response.Patch, &ops)
	for _, o := range ops {
		if o.Path == "/spec/containers/0/image" {
			patched, _ = o.Value.(string)
		}
	}
	return patched, rv.Response.Warnings, nil
}

// TestE2EWebhookDeadline: the built webhook answers within its deadline
// whatever the registry does: with the registry's version check (/v2/,
// where a client's per-repository set-up starts) or its manifests held,
// a review of an image whose repository a background patch is setting up
// answers at the deadline, unpatched with a warning, and the patch goes
// on once the registry answers.
func TestE2EWebhookDeadline(t *testing.T) {
	const deadline, margin = 2 * time.Second, 1500 * time.Millisecond
	for _, tc := range []struct {
		name  string
		stall func(*http.Request) bool
	}{
		{"version check", func(r *http.Request) bool { return r.URL.Path == "/v2/" }},
		{"manifests", func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/manifests/") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAttackRig(t)
			byDigest := a.push(t, "base/ubuntu:a", bootable(t))
			a.push(t, "base/ubuntu:b", bootable(t))
			w := a.webhook(t, "--deadline", deadline.String())
			a.stall.Store(tc.stall)
			time.AfterFunc(12*time.Second, a.release) // a review held by the stall shows as answered that late
			for i, image := range []string{byDigest.String(), a.ref(t, "base/ubuntu:b").String(), byDigest.String(), a.ref(t, "base/ubuntu:b").String()} {
				start := time.Now()
				patched, warnings, err := reviewed(t, w, image)
				took := time.Since(start)
				if err != nil {
					t.Fatalf("review %d of %s: %v", i, image, err)
				}
				if took > deadline+margin {
					t.Fatalf("review %d of %s answered after %s, --deadline %s", i, image, took.Round(time.Millisecond), deadline)
				}
				if patched != "" || len(warnings) == 0 {
					t.Fatalf("review %d of %s while the registry holds: image %q, warnings %q; want it unpatched with a warning", i, image, patched, warnings)
				}
			}
			a.release()
			waitFor(t, "the patch once the registry answers", func() bool {
				patched, _, err := reviewed(t, w, byDigest.String())
				return err == nil && patched != ""
			})
		})
	}
}

// TestE2EWebhookForgedLabels: in Debian's registry, an image whose labels
// claim to be an older patch of another image, and one built FROM an older
// patch (its labels inherited), are each served their own patch through
// the built webhook, never the other image's.
func TestE2EWebhookForgedLabels(t *testing.T) {
	a := newAttackRig(t)
	x := bootable(t)
	xd, _ := x.Digest()
	a.push(t, "base/x:v1", x)
	forge := func(img v1.Image) v1.Image {
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		if cf.Config.Labels == nil {
			cf.Config.Labels = map[string]string{}
		}
		cf.Config.Labels[imagepatch.LabelName], cf.Config.Labels[imagepatch.LabelVersion] = "oomguard-init", "2"
		cf.Config.Labels[imagepatch.LabelBaseDigest], cf.Config.Labels[imagepatch.LabelBaseName] = xd.String(), a.host+"/base/x:v1"
		img, _ = mutate.ConfigFile(img, cf)
		return img
	}
	// An older patch of X, made the way imagepatch makes it, and an image built FROM it.
	old := imagepatch.ShimSpec()
	old.Version = "2"
	p, err := imagepatch.New(old)
	if err != nil {
		t.Fatal(err)
	}
	if res := p.Apply(context.Background(), a.ref(t, "base/x:v1")); res.Action != imagepatch.ActionPush {
		t.Fatalf("the older patch: %+v", res)
	}
	parent, err := remote.Image(a.ref(t, "base/x:v1-oomguard-init.2"))
	if err != nil {
		t.Fatal(err)
	}
	app, _ := random.Layer(512, types.OCILayer)
	derived, err := mutate.Append(parent, mutate.Addendum{Layer: app, History: v1.History{CreatedBy: "RUN make install"}})
	if err != nil {
		t.Fatal(err)
	}
	w := a.webhook(t, "--deadline", "30s")
	for _, tc := range []struct {
		name string
		ref  string
		img  v1.Image
	}{
		{"an unrelated image claiming to be an older patch of X", "base/x:forged", forge(bootable(t))},
		{"an image built FROM an older patch of X", "base/x:app", derived},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.push(t, tc.ref, tc.img)
			want, _ := tc.img.Digest()
			patched, warnings, err := reviewed(t, w, a.ref(t, tc.ref).String())
			if err != nil || patched == "" {
				t.Fatalf("%s: %q %q %v, want it patched", tc.ref, patched, warnings, err)
			}
			d, err := name.NewDigest(patched, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			img, err := remote.Image(d)
			if err != nil {
				t.Fatal(err)
			}
			cf, _ := img.ConfigFile()
			if got := cf.Config.Labels[imagepatch.LabelBaseDigest]; got != want.String() {
				t.Fatalf("a pod naming %s (%s) is served %s, the patch of %s", tc.ref, want, patched, got)
			}
		})
	}
}

// TestE2EWebhookBoundsTheWork: reviews naming forty new images at once
// make the built webhook push at most its default patches per minute; the
// rest are answered at once, unpatched, with a warning.
func TestE2EWebhookBoundsTheWork(t *testing.T) {
	a := newAttackRig(t)
	var images []string
	for i := range 40 {
		images = append(images, a.push(t, fmt.Sprintf("base/img%d:v1", i), bootable(t)).String())
	}
	w := a.webhook(t, "--deadline", "5s")
	a.reg.Reset()
	var wg sync.WaitGroup
	var warned atomic.Int64
	for _, image := range images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, warnings, err := reviewed(t, w, image)
			if err != nil {
				t.Error(err)
			}
			if len(warnings) > 0 {
				warned.Add(1)
			}
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second)
	if n := a.reg.Count("PUT", "/manifests/"); n > 30 {
		t.Fatalf("40 reviews naming new images at once pushed %d patched images, want at most 30", n)
	}
	if warned.Load() == 0 {
		t.Fatal("no review said its image was not patched")
	}
}

// TestE2EWebhookClientCA: with --client-ca the built webhook serves only a
// caller presenting a certificate that CA signed, and with --client-names
// only one of those names; without a certificate, or with one another CA
// signed, the handshake fails and nothing is reviewed.
func TestE2EWebhookClientCA(t *testing.T) {
	a := newAttackRig(t)
	image := a.push(t, "base/ubuntu:v1", bootable(t)).String()
	dir := t.TempDir()
	ca, err := webhooktest.NewClientCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := webhooktest.NewClientCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	apiserver, apiserverKey, _ := ca.Issue("kube-apiserver-webhook-client")
	stranger, strangerKey, _ := ca.Issue("someone-else")
	forged, forgedKey, err := other.Issue("kube-apiserver-webhook-client")
	if err != nil {
		t.Fatal(err)
	}
	w := a.webhook(t, "--deadline", "30s", "--client-ca", ca.File, "--client-names", "kube-apiserver-webhook-client")
	for _, tc := range []struct {
		name      string
		cert, key string
		served    bool
	}{
		{"the API server's certificate", apiserver, apiserverKey, true},
		{"no certificate", "", "", false},
		{"the CA's certificate for another name", stranger, strangerKey, false},
		{"another CA's certificate for the name", forged, forgedKey, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := w.PresentCert(tc.cert, tc.key); err != nil {
				t.Fatal(err)
			}
			patched, _, err := reviewed(t, w, image)
			if tc.served && (err != nil || patched == "") {
				t.Fatalf("not served: %q %v", patched, err)
			}
			if !tc.served && err == nil {
				t.Fatalf("served (%q) without a certificate the webhook accepts", patched)
			}
		})
	}
}

// TestE2EWebhookBigReviews: thirty callers each sending a review of nearly
// the largest size at once, and holding it open, keep the built webhook's
// memory within the chart's limit: past its budget of review bytes in
// flight a review is refused at once, unread, and a pod's ordinary review
// is still answered meanwhile.
func TestE2EWebhookBigReviews(t *testing.T) {
	a := newAttackRig(t)
	image := a.push(t, "base/ubuntu:v1", bootable(t)).String()
	w := a.webhook(t, "--deadline", "30s")
	if patched, _, err := reviewed(t, w, image); err != nil || patched == "" {
		t.Fatalf("before: %q %v", patched, err)
	}
	const callers, size = 30, MaxReview - 4096
	filler := strings.Repeat("x", size-512)
	body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"ml","object":{"metadata":{"name":"p","annotations":{"a":%q}},"spec":{"containers":[{"name":"main","image":%q}]}}}}`, filler, image)
	var conns []*tls.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", w.Port), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(c, "POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
			// All but the last byte: the review stays in flight.
			for i := 0; i < len(body)-1; i += 64 << 10 {
				if _, err := c.Write([]byte(body[i:min(i+64<<10, len(body)-1)])); err != nil {
					return
				}
			}
		}()
		go func() {
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusTooManyRequests {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second)
	rss := residentMemory(t, w.Pid())
	t.Logf("%d callers holding %d-byte reviews: the webhook's RSS %d MiB, %d refused", callers, size, rss>>20, refused.Load())
	if rss > 64<<20 {
		t.Fatalf("the webhook's RSS is %d MiB with %d reviews of %d bytes in flight: want at most 64 MiB (the chart's limit is 128 MiB)", rss>>20, callers, size)
	}
	start := time.Now()
	if patched, _, err := reviewed(t, w, image); err != nil || patched == "" || time.Since(start) > 5*time.Second {
		t.Fatalf("an ordinary review while they are held: %q %v after %s", patched, err, time.Since(start))
	}
}

// residentMemory is a process's VmRSS in bytes.
func residentMemory(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
