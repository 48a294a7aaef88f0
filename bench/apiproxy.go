package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oomguard/oomguard/test/tlstest"
)

// apiProxy stands in front of the real kube-apiserver for the fleet: it
// counts each request by phase, node (its bearer token), verb and
// resource, and answers as an overloaded API server does (429 with
// Retry-After, as API Priority and Fairness answers; 500) when told to.
type apiProxy struct {
	URL, CA string // the plugins' --api-server and --api-ca-file
	srv     *http.Server
	nodes   map[string]string // bearer token → node
	fault   atomic.Int32      // 0: pass; else the status answered
	conns   atomic.Int64      // TLS connections the plugins opened

	mu      sync.Mutex
	phase   string
	counts  map[reqKey]int
	refused map[string]int // by phase: what the API server itself answered 4xx or 5xx
	protos  map[string]int // requests by protocol
	last    time.Time      // the last request
}

type reqKey struct{ phase, node, verb, resource string }

func startAPIProxy(dir, apiServer string, clusterCA []byte, nodes map[string]string) (*apiProxy, error) {
	caPEM, cert, key, err := tlstest.ServingCert(dir)
	if err != nil {
		return nil, err
	}
	p := &apiProxy{CA: dir + "/proxy-ca.crt", nodes: nodes, counts: map[reqKey]int{}, refused: map[string]int{}, protos: map[string]int{}}
	if err := os.WriteFile(p.CA, caPEM, 0o644); err != nil {
		return nil, err
	}
	target, err := url.Parse(apiServer)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(clusterCA)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) },
		ModifyResponse: func(r *http.Response) error {
			if r.StatusCode >= 400 {
				p.mu.Lock()
				p.refused[p.phase]++
				p.mu.Unlock()
			}
			return nil
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.URL = "https://" + ln.Addr().String()
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.count(r)
		switch code := int(p.fault.Load()); code {
		case 0:
			rp.ServeHTTP(w, r)
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", "1")
			status(w, code, "TooManyRequests", "Too many requests, please try again later.")
		default:
			status(w, code, "InternalError", "Internal error occurred: the bench's fault")
		}
	}), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.conns.Add(1)
		}
	}, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.ServeTLS(ln, cert, key)
	return p, nil
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":%q,"reason":%q,"code":%d}`, msg, reason, code)
}

func (p *apiProxy) count(r *http.Request) {
	node := p.nodes[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	verb := map[string]string{"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[r.Method]
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[reqKey{p.phase, node, verb, resourceOf(r.URL.Path)}]++
	p.protos[r.Proto]++
	p.last = time.Now()
}

// quiet waits until no request came for d, at most limit.
func (p *apiProxy) quiet(d, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		p.mu.Lock()
		last := p.last
		p.mu.Unlock()
		if time.Since(last) >= d {
			return
		}
	}
}

// resourceOf names a request's resource as the API server's metrics do
// (nodes/status for a subresource).
func resourceOf(path string) string {
	f := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(f) >= 2 && f[0] == "api":
		f = f[2:]
	case len(f) >= 3 && f[0] == "apis":
		f = f[3:]
	default:
		return path
	}
	if len(f) >= 2 && f[0] == "namespaces" {
		f = f[2:]
	}
	switch len(f) {
	case 0:
		return "namespaces"
	case 1, 2:
		return f[0]
	default:
		return f[0] + "/" + f[2]
	}
}

func (p *apiProxy) setPhase(phase string) {
	p.mu.Lock()
	p.phase = phase
	p.mu.Unlock()
}

// tally is what a phase cost: requests by verb and resource, and per node.
type tally struct {
	byKind  map[string]int // "verb resource"
	byNode  map[string]int
	writes  map[string]int // per node, every verb but get
	total   int
	refused int // by the API server itself
}

func (p *apiProxy) tally(phase string) tally {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := tally{byKind: map[string]int{}, byNode: map[string]int{}, writes: map[string]int{}, refused: p.refused[phase]}
	for k, n := range p.counts {
		if k.phase != phase {
			continue
		}
		t.byKind[k.verb+" "+k.resource] += n
		t.byNode[k.node] += n
		if k.verb != "get" {
			t.writes[k.node] += n
		}
		t.total += n
	}
	return t
}

func (p *apiProxy) stop() { p.srv.Close() }
