// Package kubeapi is a small client of the Kubernetes API server: JSON
// requests with a service account's bearer token, bounded in time and in
// what it reads back. It is not client-go: the node agent records Events
// with it, and client-go's clientset makes that binary 2.5 times the size
// (28.7 MB against 11.4 MB, measured); the webhook keeps one Secret and one
// webhook configuration with it.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/safeio"
)

// ServiceAccount is where a pod's service account is mounted.
const ServiceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

const (
	requestTime = 10 * time.Second
	maxResponse = 4 << 20 // a Secret or a webhook configuration, with room
)

// Client talks to one API server.
type Client struct {
	server    string
	tokenFile string
	http      *http.Client
}

// FromFiles makes a client for server ("" for the pod's environment's) that
// authenticates with the token in tokenFile and trusts the CA in caFile.
func FromFiles(server, tokenFile, caFile string) (*Client, error) {
	if server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("no API server: KUBERNETES_SERVICE_HOST is not set and no address was given")
		}
		server = "https://" + net.JoinHostPort(host, port)
	}
	ca, err := safeio.ReadFile(caFile, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("the API server's CA (in a pod: automountServiceAccountToken must be on): %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	return NewClient(server, tokenFile, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), nil
}

// NewClient makes a client for server, authenticating with the bearer token
// in tokenFile (read at each request: projected tokens rotate).
func NewClient(server, tokenFile string, tc *tls.Config) *Client {
	// HTTP/2 as client-go speaks it: one connection, kept, multiplexed, and
	// pinged when idle, so that a fleet's burst is no burst of handshakes.
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConns: 2, IdleConnTimeout: 90 * time.Second,
		ResponseHeaderTimeout: requestTime, HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}}
	return &Client{server: strings.TrimSuffix(server, "/"), tokenFile: tokenFile, http: &http.Client{Transport: tr, Timeout: requestTime, CheckRedirect: refuseRedirect}}
}

// refuseRedirect refuses every redirect: an API server does not redirect API calls, and net/http resends the token to the same host on any scheme or port.
func refuseRedirect(req *http.Request, via []*http.Request) error {
	return fmt.Errorf("refused a redirect to %s: an API server does not redirect API calls, and the service account's token must not follow one: give the API server's own address (--api-server, or the pod's KUBERNETES_SERVICE_HOST)", req.URL.Redacted())
}

// Error is the API server's answer to a request it did not do.
type Error struct {
	Method, Path string
	Code         int
	Message      string
	// RetryAfter is the wait the server asked for (429, 503), 0 for none.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, http.StatusText(e.Code), e.Message)
}

// maxRetryAfter bounds the wait a server can ask for.
const maxRetryAfter = 10 * time.Minute

// RetryAfter is the wait the API server asked for with err, 0 if none.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// retryAfter reads Retry-After's seconds (what the API server sends).
func retryAfter(h http.Header) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || s <= 0 {
		return 0
	}
	return min(time.Duration(s)*time.Second, maxRetryAfter)
}

// Code is the HTTP status of err if the API server answered it, else 0.
func Code(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Do sends in (nil: no body) as JSON with the content type ctype and
// decodes the answer into out (nil: dropped). An answer other than 2xx is
// an *Error.
func (c *Client) Do(ctx context.Context, method, path, ctype string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	tok, err := safeio.ReadFile(c.tokenFile, 64<<10)
	if err != nil {
		return fmt.Errorf("the service account's token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var st struct{ Message string }
		if json.Unmarshal(b, &st) != nil || st.Message == "" {
			st.Message = string(bytes.TrimSpace(b[:min(len(b), 512)]))
		}
		return &Error{Method: method, Path: path, Code: resp.StatusCode, Message: st.Message, RetryAfter: retryAfter(resp.Header)}
	}
	if len(b) > maxResponse {
		return fmt.Errorf("%s %s: the answer is over %d bytes", method, path, maxResponse)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}
