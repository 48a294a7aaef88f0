package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is the webhook's listeners: HTTPS for the API server, plain HTTP
// for metrics and health.
type Server struct {
	Addr, MetricsAddr string
	CertFile, KeyFile string
	Handler           *Handler
	Log               *slog.Logger
}

// Serve serves until ctx ends. The certificate is read again when its files
// change (cert-manager or a Secret's rotation, mounted by kubelet).
func (s *Server) Serve(ctx context.Context) error {
	certs := &certFiles{cert: s.CertFile, key: s.KeyFile}
	if _, err := certs.get(nil); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", s.Handler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		MaxHeaderBytes: 64 << 10, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get},
		ErrorLog: slog.NewLogLogger(s.Log.Handler(), slog.LevelDebug)}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s for the webhook: %w", s.Addr, err)
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	var msrv *http.Server
	if s.MetricsAddr != "" {
		mm := http.NewServeMux()
		mm.Handle("/metrics", promhttp.HandlerFor(s.Handler.m.Registry, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
		mm.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
		msrv = &http.Server{Addr: s.MetricsAddr, Handler: mm, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			// Metrics never stop admission: a port taken is logged, and admission goes on.
			if err := msrv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.Log.Warn("not serving metrics", "address", s.MetricsAddr, "err", err)
			}
		}()
	}
	s.Log.Info("serving the admission webhook", "address", ln.Addr().String(), "metrics", s.MetricsAddr)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("serving the webhook: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if msrv != nil {
		msrv.Shutdown(sctx)
	}
	return srv.Shutdown(sctx)
}

// certFiles is a key pair read again when either file changes.
type certFiles struct {
	cert, key string
	mu        sync.Mutex
	loaded    *tls.Certificate
	stamp     string
	checked   time.Time
}

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
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
	return c.loaded, nil
}
