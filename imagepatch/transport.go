package imagepatch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oomguard/oomguard/internal/safeio"
)

// A registry is hostile input: it may never answer, answer a byte a second,
// send a page of tags without end or a gigabyte-long one, or name a token
// server that is a private address in disguise, or rate-limit. The
// Transport bounds each request and each response body it reads, sends
// credentials to no private address but the registries' own, and meets a
// rate limit with one gate per host that every request to it (every job of
// a run, every patch of a webhook) passes: a 429 closes it for as long as
// Retry-After says (or a backoff that grows while the 429s go on) and
// lowers the rate the host is sent requests at, which grows again with
// each success.
type Transport struct {
	o       TransportOptions
	plain   http.RoundTripper
	guarded http.RoundTripper

	mu         sync.Mutex
	registries map[string]bool
	gates      map[string]*gate
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
	// RootCAs, when set, are the CAs a registry's certificate is checked
	// against (LoadCAFile: the system's and a file's).
	RootCAs *x509.CertPool
	// RateRetries is how many times one request is tried again after a
	// 429 (or a 503 with Retry-After), each after the wait the registry
	// asks, or, while the 429s go on or when it asks none, a backoff (1 s,
	// doubling, at most a minute) if that is longer; 0: 10. A wait
	// that would end past the request's context's deadline is not begun:
	// the request fails at once, saying so.
	RateRetries int
}

// DefaultTransportOptions are imagepatch's bounds.
var DefaultTransportOptions = TransportOptions{RequestTimeout: time.Minute, MaxBody: 16 << 20, MaxBlob: 64 << 20, RateRetries: 10}

// LoadCAFile is the system's CAs and those in the PEM file at path (a
// registry's private CA).
func LoadCAFile(path string) (*x509.CertPool, error) {
	pem, err := safeio.ReadFile(path, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

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
	if o.RateRetries == 0 {
		o.RateRetries = DefaultTransportOptions.RateRetries
	}
	plain := http.DefaultTransport.(*http.Transport).Clone()
	guarded := http.DefaultTransport.(*http.Transport).Clone()
	// --jobs requests at once to one registry keep their connections
	// (http.DefaultTransport keeps 2 a host: the others would be closed
	// and opened again, request after request).
	plain.MaxIdleConnsPerHost, guarded.MaxIdleConnsPerHost = 50, 50
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: publicOnly}
	guarded.DialContext = dialer.DialContext
	if o.RootCAs != nil {
		for _, t := range []*http.Transport{plain, guarded} {
			if t.TLSClientConfig == nil {
				t.TLSClientConfig = &tls.Config{}
			}
			t.TLSClientConfig.RootCAs = o.RootCAs
		}
	}
	return &Transport{o: o, plain: plain, guarded: guarded, registries: map[string]bool{}, gates: map[string]*gate{}}
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
	g := t.gate(req.URL.Host)
	for try := 0; ; try++ {
		started, err := g.wait(req.Context())
		if err != nil {
			return nil, fmt.Errorf("%s %s: waiting out the registry's rate limit: %w", req.Method, req.URL.Redacted(), err)
		}
		resp, err := t.roundTrip(req)
		if ua := (x509.UnknownAuthorityError{}); errors.As(err, &ua) {
			return nil, fmt.Errorf("%w: %s's certificate is signed by no CA imagepatch trusts (Mozilla's roots, the system's): give its CA with --ca-file (the chart: imagepatchWebhook.registryCAConfigMap)", err, req.URL.Host)
		}
		if err != nil {
			return nil, err
		}
		limited, after := rateLimited(resp, time.Now())
		if !limited {
			g.passed()
			return resp, nil
		}
		wait := g.limited(started, after, time.Now())
		// Another try needs the body again; one that cannot be had again
		// (a stream) goes back to the caller, whose own retries decide.
		if try >= t.o.RateRetries || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			return resp, nil
		}
		if dl, ok := req.Context().Deadline(); ok && time.Now().Add(wait).After(dl) {
			discard(resp)
			return nil, fmt.Errorf("%s %s: rate-limited (%d): the registry asks to wait %s, past this run's deadline", req.Method, req.URL.Redacted(), resp.StatusCode, wait.Round(time.Second))
		}
		discard(resp)
		next := req.Clone(req.Context())
		if req.GetBody != nil {
			if next.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		req = next
	}
}

// roundTrip is one request, its answer bounded.
func (t *Transport) roundTrip(req *http.Request) (*http.Response, error) {
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
	// A HEAD's Content-Length is the size of what a GET would send (a
	// layer of gigabytes): no body comes, none is read. The bound is on
	// bodies that are read.
	if req.Method != http.MethodHead && resp.ContentLength > limit {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("%s %s: %w: %d bytes, over %d", req.Method, req.URL.Redacted(), ErrTooLarge, resp.ContentLength, limit)
	}
	resp.Body = &boundedBody{r: resp.Body, left: limit, cancel: cancel, what: req.Method + " " + req.URL.Redacted(), timeout: t.o.RequestTimeout, ctx: ctx}
	return resp, nil
}

// discard closes a response that is not passed on, its body read (a
// little of it) so that the connection is kept.
func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// rateLimited says whether resp asks the client to slow down — a 429, or a
// 503 with Retry-After — and how long it asks it to wait (0: not said).
func rateLimited(resp *http.Response, now time.Time) (bool, time.Duration) {
	ra := resp.Header.Get("Retry-After")
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
	case resp.StatusCode == http.StatusServiceUnavailable && ra != "":
	default:
		return false, 0
	}
	return true, retryAfter(ra, now)
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date; 0 when
// it says nothing usable.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return min(at.Sub(now), 24*time.Hour)
	}
	return 0
}

func (t *Transport) gate(host string) *gate {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.gates[host]
	if !ok {
		// One a registry (and token server) host: a run names a few.
		g = &gate{}
		t.gates[host] = g
	}
	return g
}

// gate is one host's rate limit as its 429s reveal it: closed until a
// time, and a rate once one is known, lowered by half on a 429 and raised
// by a twentieth on each success, lifted when it is past any limit met.
type gate struct {
	mu      sync.Mutex
	until   time.Time // no request starts before this
	rate    float64   // requests a second; 0: not limited
	next    time.Time // the next request's slot at that rate
	lowered time.Time // when the rate was last lowered
	strikes int       // 429s since the last success
	win     time.Time // the second requests are being counted in
	count   int       // requests started in it
	last    int       // and in the second before
}

const (
	minRate     = 0.5
	unlimited   = 1000.0
	backoffBase = time.Second
	backoffMax  = time.Minute
)

// wait holds a request until the host may be sent it, and says when that was.
func (g *gate) wait(ctx context.Context) (time.Time, error) {
	g.mu.Lock()
	now := time.Now()
	at := now
	if g.until.After(at) {
		at = g.until
	}
	if g.rate > 0 {
		if g.next.After(at) {
			at = g.next
		}
		g.next = at.Add(time.Duration(float64(time.Second) / g.rate))
	}
	if at.Sub(g.win) >= time.Second {
		if at.Sub(g.win) < 2*time.Second {
			g.last = g.count
		} else {
			g.last = 0
		}
		g.win, g.count = at, 0
	}
	g.count++
	g.mu.Unlock()
	if d := at.Sub(now); d > 0 {
		if dl, ok := ctx.Deadline(); ok && at.After(dl) {
			return at, fmt.Errorf("the host is closed for %s, past the deadline", d.Round(time.Second))
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return at, ctx.Err()
		}
	}
	return at, nil
}

// limited records a 429 to a request started at started and says how long
// the host is closed now.
func (g *gate) limited(started time.Time, after time.Duration, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	// One strike, and the rate lowered once, for the requests that were in
	// flight together: only a request started after the last 429 counts
	// again (eight jobs' 429s at once are one refusal, not eight).
	again := started.After(g.lowered)
	if again {
		g.strikes++
	}
	// As long as the registry asks, and longer while its 429s go on: a
	// block that outlasts what it says is outlasted.
	wait := min(backoffBase<<min(max(g.strikes, 1)-1, 10), backoffMax)
	wait += time.Duration(rand.Int64N(int64(wait/5) + 1)) // up to a fifth more, so that clients part
	if after > 0 && (g.strikes <= 1 || after > wait) {
		wait = after
	}
	if end := now.Add(wait); end.After(g.until) {
		g.until = end
	}
	if again {
		if g.rate == 0 {
			g.rate = float64(max(g.count, g.last))
		}
		g.rate = max(g.rate/2, minRate)
		g.lowered = now
		g.next = g.until
	}
	return g.until.Sub(now)
}

// passed records an answer that was not a rate limit.
func (g *gate) passed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.strikes = 0
	if g.rate > 0 {
		if g.rate *= 1.05; g.rate > unlimited {
			g.rate = 0
		}
	}
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
