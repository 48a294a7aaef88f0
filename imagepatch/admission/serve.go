package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oomguard/oomguard/internal/metricsserver"
)

// Certificates is where the serving certificate comes from: files
// (CertFiles) or the webhook's own CA (SelfSigned).
type Certificates interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// Server is the webhook's listeners: HTTPS for the API server, plain HTTP
// for metrics and health.
type Server struct {
	Addr, MetricsAddr string
	Certs             Certificates
	// Clients, when set, is who may connect to Addr: without a client
	// certificate it verifies, the TLS handshake fails.
	Clients *ClientAuth
	Handler *Handler
	Log     *slog.Logger
}

// Serve serves until ctx ends, with the probes on both listeners.
func (s *Server) Serve(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("/mutate", s.Handler)
	s.probes(mux)
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.Certs.GetCertificate}
	if s.Clients != nil {
		tc.GetConfigForClient = s.Clients.config(tc)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		MaxHeaderBytes: 64 << 10, TLSConfig: tc, ErrorLog: slog.NewLogLogger(s.Log.Handler(), slog.LevelDebug)}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s for the webhook: %w", s.Addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	if s.MetricsAddr != "" {
		mm := http.NewServeMux()
		mm.Handle("/metrics", promhttp.HandlerFor(s.Handler.m.Registry, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: metricsserver.WriteTimeout / 2}))
		s.probes(mm)
		metricsserver.Serve(ctx, s.MetricsAddr, mm, s.Log, s.Handler.m.serveErrors.Inc)
	}
	s.Log.Info("serving the admission webhook", "address", ln.Addr().String(), "metrics", s.MetricsAddr, "client certificates", s.Clients != nil)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("serving the webhook: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// probes serves /healthz, 503 until there is a certificate to serve (the
// readiness probe), and /livez, 200 while the process answers (the liveness
// probe: a restart brings no certificate sooner).
func (s *Server) probes(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if _, err := s.Certs.GetCertificate(nil); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
}

// CertFiles is a key pair read again when either file changes
// (cert-manager's or a Secret's rotation, mounted by kubelet).
type CertFiles struct {
	cert, key string
	m         *Metrics
	mu        sync.Mutex
	loaded    *tls.Certificate
	stamp     string
	checked   time.Time
}

// NewCertFiles reads the pair in cert and key.
func NewCertFiles(cert, key string, m *Metrics) (*CertFiles, error) {
	c := &CertFiles{cert: cert, key: key, m: m}
	_, err := c.GetCertificate(nil)
	return c, err
}

// GetCertificate serves the pair, read again if its files changed.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil && time.Since(c.checked) < time.Second {
		return c.loaded, nil
	}
	c.checked = time.Now()
	stamp := ""
	for _, f := range []string{c.cert, c.key} {
		st, err := os.Stat(f)
		if err != nil {
			if c.loaded != nil {
				return c.loaded, nil // mid-rotation: keep serving the last pair
			}
			return nil, fmt.Errorf("the webhook's TLS key pair: %w", err)
		}
		stamp += fmt.Sprintf("%d/%d;", st.ModTime().UnixNano(), st.Size())
	}
	if c.loaded != nil && stamp == c.stamp {
		return c.loaded, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		if c.loaded != nil {
			return c.loaded, nil
		}
		return nil, fmt.Errorf("the webhook's TLS key pair %s, %s: %w", c.cert, c.key, err)
	}
	c.loaded, c.stamp = &pair, stamp
	c.m.certExpiry.Set(float64(pair.Leaf.NotAfter.Unix()))
	return c.loaded, nil
}

// ClientAuth requires of every connection a client certificate its CA
// signed (the API server's, which its AdmissionConfiguration's kubeconfig
// for webhooks makes it present) and, where names are given, that names
// one of them (its Common Name or a DNS name). The CA file is read again
// when it changes; a file that does not parse keeps the last good one.
type ClientAuth struct {
	file    string
	names   []string
	m       *Metrics
	mu      sync.Mutex
	pool    *x509.CertPool
	stamp   string
	checked time.Time
}

// NewClientAuth reads the CA bundle in file.
func NewClientAuth(file string, names []string, m *Metrics) (*ClientAuth, error) {
	c := &ClientAuth{file: file, names: names, m: m}
	if _, err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// load is the CA pool, read again if its file changed.
func (c *ClientAuth) load() (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pool != nil && time.Since(c.checked) < time.Second {
		return c.pool, nil
	}
	c.checked = time.Now()
	st, err := os.Stat(c.file)
	if err == nil && c.pool != nil && fmt.Sprintf("%d/%d", st.ModTime().UnixNano(), st.Size()) == c.stamp {
		return c.pool, nil
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(c.file)
	}
	pool := x509.NewCertPool()
	if err == nil && !pool.AppendCertsFromPEM(b) {
		err = errors.New("no PEM certificate in it")
	}
	if err != nil {
		if c.pool != nil {
			return c.pool, nil // mid-rotation: keep the last one
		}
		return nil, fmt.Errorf("the client CA %s (--client-ca): %w", c.file, err)
	}
	c.pool, c.stamp = pool, fmt.Sprintf("%d/%d", st.ModTime().UnixNano(), st.Size())
	return pool, nil
}

// config is base requiring a client certificate c verifies.
func (c *ClientAuth) config(base *tls.Config) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	return func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := c.load()
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		cfg.GetConfigForClient = nil
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, pool
		cfg.VerifyConnection = c.verify
		return cfg, nil
	}
}

// verify refuses a client whose verified certificate names none of c.names.
func (c *ClientAuth) verify(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		c.m.clientRefused.Inc()
		return errors.New("no verified client certificate")
	}
	if len(c.names) == 0 {
		return nil
	}
	leaf := cs.VerifiedChains[0][0]
	for _, n := range c.names {
		if leaf.Subject.CommonName == n || slices.Contains(leaf.DNSNames, n) {
			return nil
		}
	}
	c.m.clientRefused.Inc()
	return fmt.Errorf("client certificate %q names none of %s (--client-names)", leaf.Subject.CommonName, strings.Join(c.names, ", "))
}
