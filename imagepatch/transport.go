package imagepatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A registry is hostile input: it may never answer, answer a byte a second,
// send a page of tags without end or a gigabyte-long one, or name a token
// server that is a private address in disguise. The Transport bounds each
// request and each response, and sends credentials to no private address
// but the registries' own.
type Transport struct {
	o       TransportOptions
	plain   http.RoundTripper
	guarded http.RoundTripper

	mu         sync.Mutex
	registries map[string]bool
}

// TransportOptions bound what one request may take.
type TransportOptions struct {
	// RequestTimeout bounds one request, its response body included.
	RequestTimeout time.Duration
	// MaxBody bounds a response body other than a blob's (a manifest, a
	// page of tags, an error); MaxBlob a blob's (a config).
	MaxBody, MaxBlob int64
	// AllowPrivate lets credentials go to a private, loopback or link-local
	// address other than a registry's own (an in-cluster token server).
	AllowPrivate bool
}

// DefaultTransportOptions are imagepatch's bounds.
var DefaultTransportOptions = TransportOptions{RequestTimeout: time.Minute, MaxBody: 16 << 20, MaxBlob: 64 << 20}

// ErrTooLarge is a response over its bound.
var ErrTooLarge = errors.New("response too large")

// NewTransport makes a Transport over copies of http.DefaultTransport.
func NewTransport(o TransportOptions) *Transport {
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultTransportOptions.RequestTimeout
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultTransportOptions.MaxBody
	}
	if o.MaxBlob <= 0 {
		o.MaxBlob = DefaultTransportOptions.MaxBlob
	}
	plain := http.DefaultTransport.(*http.Transport).Clone()
	guarded := http.DefaultTransport.(*http.Transport).Clone()
	// --jobs requests at once to one registry keep their connections
	// (http.DefaultTransport keeps 2 a host: the others would be closed
	// and opened again, request after request).
	plain.MaxIdleConnsPerHost, guarded.MaxIdleConnsPerHost = 50, 50
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: publicOnly}
	guarded.DialContext = dialer.DialContext
	return &Transport{o: o, plain: plain, guarded: guarded, registries: map[string]bool{}}
}

// Allow names a registry (host or host:port) imagepatch was asked to work
// with: requests to it may go to a private address with credentials.
func (t *Transport) Allow(registries ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range registries {
		t.registries[r] = true
		if h, _, err := net.SplitHostPort(r); err == nil {
			t.registries[h] = true
		}
	}
}

func (t *Transport) allowed(host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.registries[host] || t.registries[hostOnly(host)]
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// carriesCredentials reports whether a request sends a secret: a registry's
// Basic credentials to a token server (go-containerregistry's exchange), or
// an OAuth2 password grant in a form.
func carriesCredentials(req *http.Request) bool {
	return req.Header.Get("Authorization") != "" ||
		(req.Method == http.MethodPost && strings.HasPrefix(req.Header.Get("Content-Type"), "application/x-www-form-urlencoded"))
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt := t.plain
	if !t.o.AllowPrivate && carriesCredentials(req) && !t.allowed(req.URL.Host) {
		// Decided on the address the name resolves to when the connection
		// is made, not on the name's spelling: "localhost" is loopback too.
		rt = t.guarded
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.o.RequestTimeout)
	resp, err := rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("%s %s: no answer within %s: %w", req.Method, req.URL.Redacted(), t.o.RequestTimeout, err)
		}
		return nil, err
	}
	limit := t.o.MaxBody
	if strings.Contains(req.URL.Path, "/blobs/") {
		limit = t.o.MaxBlob
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("%s %s: %w: %d bytes, over %d", req.Method, req.URL.Redacted(), ErrTooLarge, resp.ContentLength, limit)
	}
	resp.Body = &boundedBody{r: resp.Body, left: limit, cancel: cancel, what: req.Method + " " + req.URL.Redacted(), timeout: t.o.RequestTimeout, ctx: ctx}
	return resp, nil
}

// boundedBody ends a response at its bound and at the request's deadline.
type boundedBody struct {
	r       io.ReadCloser
	left    int64
	cancel  context.CancelFunc
	what    string
	timeout time.Duration
	ctx     context.Context
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("%s: %w", b.what, ErrTooLarge)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, fmt.Errorf("%s: %w", b.what, ErrTooLarge)
	}
	if err != nil && b.ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%s: not all of it within %s: %w", b.what, b.timeout, err)
	}
	return n, err
}

func (b *boundedBody) Close() error {
	b.cancel()
	return b.r.Close()
}

// publicOnly refuses a connection to a private, loopback, link-local or
// unspecified address: the dialer calls it with the address it resolved.
func publicOnly(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() {
		return fmt.Errorf("refusing to send credentials to %s, a private, loopback or link-local address that is not the registry's (--allow-private-token-hosts allows it)", ip)
	}
	return nil
}
