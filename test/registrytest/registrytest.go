// Package registrytest runs Debian's docker-registry (the CNCF distribution
// registry) on a loopback port with a temporary config and storage, behind a
// proxy that counts requests and bytes and can inject failures.
package registrytest

import (
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
)

// Binary is Debian's registry.
const Binary = "/usr/bin/docker-registry"

// Registry is a running registry and the proxy in front of it.
type Registry struct {
	Host   string // the proxy, host:port; use this
	Direct string // the registry itself
	cmd    *exec.Cmd
	proxy  *http.Server
	mu     sync.Mutex
	log    []Request
	inject func(r *http.Request) int
}

// Request is one request that passed the proxy.
type Request struct {
	Method, Path, Query string
	Status              int
	In, Out             int64 // body bytes sent to and received from the registry
}

// Start runs a registry with its storage under dir.
func Start(dir string) (*Registry, error) {
	if _, err := os.Stat(Binary); err != nil {
		return nil, fmt.Errorf("%s is missing (apt-get install docker-registry)", Binary)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
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
`, filepath.Join(dir, "data"), port)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	r := &Registry{Direct: fmt.Sprintf("127.0.0.1:%d", port)}
	r.cmd = exec.Command(Binary, "serve", cfgPath)
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	if err := waitReady("http://" + r.Direct + "/v2/"); err != nil {
		r.cmd.Process.Kill()
		log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
		return nil, fmt.Errorf("docker-registry did not start: %w\n%s", err, log)
	}
	return r, r.startProxy()
}

func (r *Registry) startProxy() error {
	target, _ := url.Parse("http://" + r.Direct)
	rp := httputil.NewSingleHostReverseProxy(target)
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
			if code := inject(req); code != 0 {
				io.Copy(io.Discard, req.Body)
				rec.Status = code
				r.record(rec)
				http.Error(w, `{"errors":[{"code":"UNAVAILABLE","message":"injected failure"}]}`, code)
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
	r.mu.Lock()
	r.inject = f
	r.mu.Unlock()
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

func waitReady(u string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
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
