package kubeapi

import (
	"bufio"
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// No credential follows a redirect: the API server's URL redirecting to
// http on its own host and port, to another port, to another host, to https
// elsewhere, gets the call refused, saying why, and the token sent nowhere
// but to the API server.
func TestNoCredentialFollowsARedirect(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	target := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if a := r.Header.Get("Authorization"); a != "" {
			leaked = append(leaked, r.Host+": "+a)
		}
		w.Write([]byte(`{}`))
	})
	redirect := ""
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil { // the API server's own port, spoken to in clear
			target(w, r)
			return
		}
		mu.Lock()
		to := redirect
		mu.Unlock()
		http.Redirect(w, r, to+r.URL.Path, http.StatusTemporaryRedirect)
	})
	srv := httptest.NewUnstartedServer(api)
	srv.Listener = sniffTLS(t, srv.Listener, api)
	srv.StartTLS()
	defer srv.Close()
	otherPort := httptest.NewServer(target)
	defer otherPort.Close()
	otherTLS := httptest.NewTLSServer(target)
	defer otherTLS.Close()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	otherHost := &httptest.Server{Listener: l, Config: &http.Server{Handler: target}}
	otherHost.Start()
	defer otherHost.Close()

	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	os.WriteFile(token, []byte("secret-token\n"), 0o600)
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	c, err := FromFiles(srv.URL, token, ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, to string }{
		{"http on the same host and port", "http://" + srv.Listener.Addr().String()},
		{"http on another port", otherPort.URL},
		{"http on another host", otherHost.URL},
		{"https on another port", otherTLS.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			redirect, leaked = tc.to, nil
			mu.Unlock()
			err := c.Do(context.Background(), "GET", "/api/v1/nodes/n", "", nil, nil)
			if err == nil || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), tc.to) {
				t.Errorf("a redirect to %s: %v, want a refusal naming the redirect", tc.to, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(leaked) > 0 {
				t.Errorf("the token followed a redirect to %s: %v", tc.to, leaked)
			}
		})
	}
}

// sniffTLS serves TLS on l as before, and plain HTTP on the same port to
// plain, as an attacker in the middle could.
func sniffTLS(t *testing.T, l net.Listener, plain http.Handler) net.Listener {
	tlsConns := &chanListener{Listener: l, c: make(chan net.Conn)}
	plainConns := &chanListener{Listener: l, c: make(chan net.Conn)}
	go (&http.Server{Handler: plain}).Serve(plainConns)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				close(tlsConns.c)
				close(plainConns.c)
				return
			}
			go func() {
				br := bufio.NewReader(conn)
				b, err := br.Peek(1)
				if err != nil {
					conn.Close()
					return
				}
				pc := &peekedConn{Conn: conn, r: br}
				if b[0] == 0x16 { // a TLS handshake record
					tlsConns.c <- pc
				} else {
					plainConns.c <- pc
				}
			}()
		}
	}()
	return tlsConns
}

type chanListener struct {
	net.Listener
	c chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	c, ok := <-l.c
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// The client speaks HTTP/2 to the API server, as client-go does: one
// connection kept and multiplexed, not a handshake per burst.
func TestSpeaksHTTP2(t *testing.T) {
	var mu sync.Mutex
	protos := map[string]int{}
	conns := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto]++
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.StartTLS()
	defer srv.Close()
	c := NewClient(srv.URL, tokenFile(t), srv.Client().Transport.(*http.Transport).TLSClientConfig)
	if err := c.Do(context.Background(), http.MethodGet, "/api/v1/nodes/a", "", nil, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 19 {
		wg.Go(func() {
			if err := c.Do(context.Background(), http.MethodGet, "/api/v1/nodes/a", "", nil, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if protos["HTTP/2.0"] != 20 || conns != 1 {
		t.Fatalf("requests by protocol %v over %d connections, want 20 over HTTP/2 on one", protos, conns)
	}
}

// A 429's Retry-After is the error's, bounded; other answers have none.
func TestRetryAfter(t *testing.T) {
	for header, want := range map[string]time.Duration{"7": 7 * time.Second, "": 0, "soon": 0, "-3": 0, "99999": maxRetryAfter} {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if header != "" {
				w.Header().Set("Retry-After", header)
			}
			http.Error(w, `{"message":"too many requests"}`, http.StatusTooManyRequests)
		}))
		c := NewClient(srv.URL, tokenFile(t), srv.Client().Transport.(*http.Transport).TLSClientConfig)
		err := c.Do(context.Background(), http.MethodPost, "/api/v1/namespaces/a/events", "application/json", map[string]string{}, nil)
		srv.Close()
		if Code(err) != http.StatusTooManyRequests || RetryAfter(err) != want {
			t.Fatalf("Retry-After %q: %v, after %s, want %s", header, err, RetryAfter(err), want)
		}
	}
	if RetryAfter(errors.New("no answer")) != 0 {
		t.Fatal("an error without an answer has a Retry-After")
	}
}

func tokenFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
