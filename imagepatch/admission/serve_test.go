package admission

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/webhooktest"
)

// The client CA is read again when its file changes; a file that does not
// parse keeps the last good one; a certificate is accepted only for one of
// the names, when names are given.
func TestClientAuth(t *testing.T) {
	dir := t.TempDir()
	first, err := webhooktest.NewClientCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := webhooktest.NewClientCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClientAuth(first.File, []string{"kube-apiserver"}, NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	pool := func() *x509.CertPool {
		t.Helper()
		cfg, err := c.config(&tls.Config{})(nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Fatalf("client auth %v", cfg.ClientAuth)
		}
		return cfg.ClientCAs
	}
	trusts := func(ca *webhooktest.ClientCA) bool {
		b, _ := os.ReadFile(ca.File)
		want := x509.NewCertPool()
		want.AppendCertsFromPEM(b)
		return pool().Equal(want)
	}
	if !trusts(first) {
		t.Fatal("not the first CA")
	}
	b, _ := os.ReadFile(second.File)
	os.WriteFile(first.File, append(b, '\n'), 0o644)
	c.checked = time.Time{} // as a second later
	if !trusts(second) {
		t.Fatal("the CA file changed, the CA did not")
	}
	os.WriteFile(first.File, []byte("not a certificate"), 0o644)
	c.checked = time.Time{}
	if !trusts(second) {
		t.Fatal("a broken CA file replaced the last good CA")
	}
	if _, err := NewClientAuth(first.File, nil, NewMetrics()); err == nil {
		t.Fatal("started on a CA file without a certificate")
	}

	for _, tc := range []struct {
		cn   string
		dns  []string
		want bool
	}{
		{"kube-apiserver", nil, true},
		{"someone", []string{"kube-apiserver"}, true},
		{"someone", []string{"other"}, false},
	} {
		leaf := &x509.Certificate{DNSNames: tc.dns}
		leaf.Subject.CommonName = tc.cn
		if err := c.verify(tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}); (err == nil) != tc.want {
			t.Errorf("%s %v: %v, want accepted %v", tc.cn, tc.dns, err, tc.want)
		}
	}
	if err := c.verify(tls.ConnectionState{}); err == nil {
		t.Error("accepted a connection without a verified certificate")
	}
}

// certsOr serves a certificate once it has one.
type certsOr struct{ cert *tls.Certificate }

func (c *certsOr) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c.cert == nil {
		return nil, errors.New("no certificate yet")
	}
	return c.cert, nil
}

// The probes: /livez answers while the process does, /healthz only once
// there is a certificate to serve, so that kubelet restarts a hung webhook
// but only holds back one still waiting for its certificate.
func TestProbes(t *testing.T) {
	certs := &certsOr{}
	mux := http.NewServeMux()
	(&Server{Certs: certs}).probes(mux)
	code := func(path string) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if l, h := code("/livez"), code("/healthz"); l != http.StatusOK || h != http.StatusServiceUnavailable {
		t.Fatalf("without a certificate: /livez %d, /healthz %d; want 200, 503", l, h)
	}
	certs.cert = &tls.Certificate{}
	if l, h := code("/livez"), code("/healthz"); l != http.StatusOK || h != http.StatusOK {
		t.Fatalf("with a certificate: /livez %d, /healthz %d; want 200, 200", l, h)
	}
}
