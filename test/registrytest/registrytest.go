// Package registrytest runs Debian's docker-registry (the CNCF distribution
// registry) on a loopback port with a temporary config and storage, behind a
// proxy that counts requests and bytes and can inject failures. StartWith
// runs distribution v3 instead (make components builds it), and either of
// them with TLS from a private CA and basic auth, as registries are run.
package registrytest

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/test/testbin"
	"github.com/oomguard/oomguard/test/tlstest"
)

// Binary is Debian's registry.
const Binary = "/usr/bin/docker-registry"

// Registry is a running registry and the proxy in front of it.
type Registry struct {
	Host   string // the proxy, host:port; use this
	Direct string // the registry itself
	Dir    string // its config, storage and log
	// With TLS: the private CA that signed the certificate the registry
	// and the proxy serve (for 127.0.0.1), and a file of it.
	CAPEM  []byte
	CAFile string
	// With basic auth: the one user and password.
	User, Password string
	cmd            *exec.Cmd
	proxy          *http.Server
	mu             sync.Mutex
	log            []Request
	inject         func(r *http.Request) *Answer
}

// Request is one request that passed the proxy.
type Request struct {
	Method, Path, Query string
	Status              int
	In, Out             int64 // body bytes sent to and received from the registry
}

// Start runs a registry with its storage under dir.
func Start(dir string) (*Registry, error) { return StartWith(dir, Options{}) }

// Options says which registry StartWith runs, and how.
type Options struct {
	// Binary is the registry: Debian's docker-registry (2.8) when empty,
	// or DistributionV3().
	Binary string
	// TLS serves HTTPS, the registry and the proxy, with a certificate for
	// 127.0.0.1 from a private CA of the registry's own.
	TLS bool
	// User and Password turn on basic auth (an htpasswd file of bcrypt
	// hashes, which make components' htpasswd writes).
	User, Password string
}

// DistributionV3 is distribution v3's registry, which make components
// builds from its Go module, or an error saying to build it.
func DistributionV3() (string, error) { return component("registry") }

// component is build/components/distribution/NAME.
func component(name string) (string, error) { return testbin.Component("distribution", name) }

// StartWith runs the registry o names with its storage under dir.
func StartWith(dir string, o Options) (*Registry, error) {
	bin := o.Binary
	if bin == "" {
		bin = Binary
	}
	if _, err := os.Stat(bin); err != nil {
		if bin == Binary {
			return nil, fmt.Errorf("%s is missing (apt-get install docker-registry)", Binary)
		}
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{Direct: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, User: o.User, Password: o.Password}
	var extra string
	if o.TLS {
		caPEM, cert, key, err := tlstest.ServingCert(dir)
		if err != nil {
			return nil, err
		}
		r.CAPEM, r.CAFile = caPEM, filepath.Join(dir, "ca.crt")
		if err := os.WriteFile(r.CAFile, caPEM, 0o644); err != nil {
			return nil, err
		}
		extra += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", cert, key)
	}
	if o.User != "" {
		htpasswd, err := component("htpasswd")
		if err != nil {
			return nil, err
		}
		line, err := exec.Command(htpasswd, o.User, o.Password).Output()
		if err != nil {
			return nil, fmt.Errorf("htpasswd: %w", err)
		}
		path := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(path, line, 0o600); err != nil {
			return nil, err
		}
		extra += fmt.Sprintf("auth:\n  htpasswd:\n    realm: oomguard-test\n    path: %s\n", path)
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:%d
%s`, filepath.Join(dir, "data"), port, extra)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	r.cmd = exec.Command(bin, "serve", cfgPath)
	// distribution v3 would export traces to a collector on localhost.
	r.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true")
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	if err := r.waitReady(r.Direct); err != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
		return nil, fmt.Errorf("%s did not start: %w\n%s", bin, err, log)
	}
	return r, r.startProxy()
}

// Scheme is https with TLS, else http.
func (r *Registry) Scheme() string {
	if r.CAPEM != nil {
		return "https"
	}
	return "http"
}

// Transport is an HTTP transport that trusts the registry's CA (when it
// has one).
func (r *Registry) Transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.CAPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(r.CAPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return tr
}

// Auth is the registry's credentials for go-containerregistry (anonymous
// without basic auth).
func (r *Registry) Auth() authn.Authenticator {
	if r.User == "" {
		return authn.Anonymous
	}
	return &authn.Basic{Username: r.User, Password: r.Password}
}

// RemoteOptions are go-containerregistry's options to reach the registry
// (through the proxy): its CA and its credentials.
func (r *Registry) RemoteOptions() []remote.Option {
	return []remote.Option{remote.WithTransport(r.Transport()), remote.WithAuth(r.Auth())}
}

// DockerConfig writes a Docker config (config.json) under dir holding the
// registry's credentials for the proxy and the registry itself, as `docker
// login` would, and returns dir: for DOCKER_CONFIG.
func (r *Registry) DockerConfig(dir string) (string, error) {
	auths := map[string]any{}
	if r.User != "" {
		a := base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))
		auths[r.Host] = map[string]string{"auth": a}
		auths[r.Direct] = map[string]string{"auth": a}
	}
	b, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// CertDir writes the registry's CA as dir/ca.crt, for the --cert-dir of
// podman, buildah and skopeo, and returns dir.
func (r *Registry) CertDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "ca.crt"), r.CAPEM, 0o644)
}

// PlantBlob puts a blob of size zero bytes into repo by writing the
// registry's filesystem storage directly, sparse (nothing is written to
// disk and nothing read to upload it): for layers of gigabytes that a test
// must never read. digest is the SHA-256 of size zero bytes (ZeroDigest).
func (r *Registry) PlantBlob(repo string, size int64, digest string) error {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 {
		return fmt.Errorf("bad digest %q", digest)
	}
	root := filepath.Join(r.Dir, "data", "docker", "registry", "v2")
	blob := filepath.Join(root, "blobs", "sha256", hex[:2], hex, "data")
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return err
	}
	f, err := os.Create(blob)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	link := filepath.Join(root, "repositories", repo, "_layers", "sha256", hex, "link")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	return os.WriteFile(link, []byte(digest), 0o644)
}

// ZeroDigest is the SHA-256 digest of size zero bytes.
func ZeroDigest(size int64) string {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		h.Write(buf[:n])
		left -= n
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil))
}

func (r *Registry) startProxy() error {
	target, _ := url.Parse(r.Scheme() + "://" + r.Direct)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = r.Transport()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.Host = ln.Addr().String()
	r.proxy = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := Request{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery}
		r.mu.Lock()
		inject := r.inject
		r.mu.Unlock()
		if inject != nil {
			if a := inject(req); a != nil && a.Status != 0 {
				io.Copy(io.Discard, req.Body)
				rec.Status = a.Status
				r.record(rec)
				for k, v := range a.Header {
					w.Header()[k] = v
				}
				body := a.Body
				if body == "" {
					body = `{"errors":[{"code":"UNAVAILABLE","message":"injected failure"}]}`
				}
				http.Error(w, body, a.Status)
				return
			}
		}
		cb := &countingBody{r: req.Body}
		req.Body = cb
		cw := &countingWriter{ResponseWriter: w, status: 200}
		rp.ServeHTTP(cw, req)
		rec.Status, rec.In, rec.Out = cw.status, cb.n, cw.n
		r.record(rec)
	})}
	if r.CAPEM != nil {
		cert, err := tls.LoadX509KeyPair(filepath.Join(r.Dir, "tls.crt"), filepath.Join(r.Dir, "tls.key"))
		if err != nil {
			ln.Close()
			return err
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
	}
	go r.proxy.Serve(ln)
	return nil
}

func (r *Registry) record(rec Request) {
	r.mu.Lock()
	r.log = append(r.log, rec)
	r.mu.Unlock()
}

// Inject makes the proxy answer with the returned status instead of
// forwarding, for every request where f returns non-zero; nil stops it.
func (r *Registry) Inject(f func(*http.Request) int) {
	if f == nil {
		r.InjectAnswer(nil)
		return
	}
	r.InjectAnswer(func(req *http.Request) *Answer {
		if code := f(req); code != 0 {
			return &Answer{Status: code}
		}
		return nil
	})
}

// Answer is what the proxy answers instead of forwarding a request.
type Answer struct {
	Status int
	Header http.Header
	Body   string // the registry's JSON errors; an injected failure when empty
}

// InjectAnswer makes the proxy answer with f's Answer instead of
// forwarding, for every request where f returns one; nil stops it.
func (r *Registry) InjectAnswer(f func(*http.Request) *Answer) {
	r.mu.Lock()
	r.inject = f
	r.mu.Unlock()
}

// RateLimit makes the proxy allow perSecond requests a second (in a burst
// of at most perSecond), as a registry's rate limit does, and answer the
// others 429 TOOMANYREQUESTS with Retry-After: retryAfter seconds, unread;
// 0 stops it.
func (r *Registry) RateLimit(perSecond int, retryAfter int) {
	if perSecond <= 0 {
		r.InjectAnswer(nil)
		return
	}
	var mu sync.Mutex
	tokens, last := float64(perSecond), time.Now()
	r.InjectAnswer(func(*http.Request) *Answer {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		tokens = min(float64(perSecond), tokens+now.Sub(last).Seconds()*float64(perSecond))
		last = now
		if tokens >= 1 {
			tokens--
			return nil
		}
		return &Answer{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {fmt.Sprint(retryAfter)}},
			Body: `{"errors":[{"code":"TOOMANYREQUESTS","message":"rate limit exceeded"}]}`}
	})
}

// Requests returns what passed the proxy since the last Reset.
func (r *Registry) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.log...)
}

// Reset forgets the recorded requests.
func (r *Registry) Reset() { r.mu.Lock(); r.log = nil; r.mu.Unlock() }

// Count counts recorded requests of method whose path contains substr.
func (r *Registry) Count(method, substr string) int {
	n := 0
	for _, q := range r.Requests() {
		if q.Method == method && strings.Contains(q.Path+"?"+q.Query, substr) {
			n++
		}
	}
	return n
}

// Stop stops the proxy and the registry.
func (r *Registry) Stop() {
	if r.proxy != nil {
		r.proxy.Close()
	}
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// waitReady waits until the registry answers its /v2/ (401 counts, with
// basic auth).
func (r *Registry) waitReady(host string) error {
	u := r.Scheme() + "://" + host + "/v2/"
	c := &http.Client{Transport: r.Transport(), Timeout: 5 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized && r.User != "" {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("no answer on " + u)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

type countingBody struct {
	r io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
func (c *countingBody) Close() error { return c.r.Close() }

type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(s int) { c.status = s; c.ResponseWriter.WriteHeader(s) }
func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}
