// Package webhooktest runs `imagepatch webhook` for tests and benchmarks on
// loopback, with a serving certificate of its own, and registers it with an
// API server as the chart does, by URL.
package webhooktest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/tlstest"
)

// Label is the namespace label the chart's webhook selects on.
const Label = "oomguard.io/patch-images"

// Webhook is a running `imagepatch webhook`.
type Webhook struct {
	Port   int
	CAPEM  []byte
	URL    string // its /mutate
	cmd    *exec.Cmd
	log    syncbuf.Buffer
	client *http.Client
}

// Start runs bin's webhook on a free loopback port with a certificate made
// under dir, passing args after the serving flags, and waits until it
// serves TLS.
func Start(bin, dir string, args ...string) (*Webhook, error) {
	caPEM, cert, key, err := tlstest.ServingCert(dir)
	if err != nil {
		return nil, err
	}
	return start(bin, caPEM, append([]string{"--tls-cert-file", cert, "--tls-key-file", key}, args...))
}

// StartT is Start for a test: it fails t when the webhook does not start,
// and stops it when t ends, logging what it said when t failed.
func StartT(t testing.TB, bin string, args ...string) *Webhook {
	t.Helper()
	w, err := Start(bin, t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Stop()
		if t.Failed() {
			t.Logf("webhook:\n%s", w.Log())
		}
	})
	return w
}

// StartSelfSigned runs bin's webhook on a free loopback port making its own
// certificate (args name the Secret, the configuration, the API server) and
// waits until it serves TLS; Review does not trust it: the API server does.
func StartSelfSigned(bin string, args ...string) (*Webhook, error) {
	return start(bin, nil, append([]string{"--tls-hosts", "127.0.0.1"}, args...))
}

func start(bin string, caPEM []byte, args []string) (*Webhook, error) {
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	w := &Webhook{Port: port, CAPEM: caPEM, URL: fmt.Sprintf("https://127.0.0.1:%d/mutate", port),
		client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64}}}
	w.cmd = exec.Command(bin, append([]string{"webhook", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-address", ""}, args...)...)
	w.cmd.Stdout, w.cmd.Stderr = &w.log, &w.log
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
			return w, nil
		}
		if time.Now().After(deadline) {
			w.Stop()
			return nil, fmt.Errorf("the webhook did not serve on %d: %w\n%s", port, err, w.Log())
		}
	}
}

// Stop kills the webhook.
func (w *Webhook) Stop() {
	w.cmd.Process.Kill()
	w.cmd.Wait()
}

// Log is what the webhook wrote.
func (w *Webhook) Log() string { return w.log.String() }

// Pid is the webhook's process id.
func (w *Webhook) Pid() int { return w.cmd.Process.Pid }

// PresentCert makes Review present the client certificate in certFile and
// keyFile, as an API server configured for it does; "" presents none.
func (w *Webhook) PresentCert(certFile, keyFile string) error {
	tr := w.client.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = nil
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return err
		}
		tr.TLSClientConfig.Certificates = []tls.Certificate{pair}
	}
	w.client = &http.Client{Timeout: w.client.Timeout, Transport: tr}
	return nil
}

// Review posts an AdmissionReview and returns the answer's body; its
// connections are kept, as the API server keeps them.
func (w *Webhook) Review(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("the webhook answered %s: %s", resp.Status, b)
	}
	return b, err
}

// Config is the chart's MutatingWebhookConfiguration for this webhook, by
// URL: pods created (and ephemeral containers added) in namespaces labelled
// Label=enabled, never kube-system; with no caBundle if w makes its own.
func (w *Webhook) Config(name string) string { return w.ConfigSelecting(name, Label) }

// ConfigSelecting is Config for the namespaces labelled label=enabled.
func (w *Webhook) ConfigSelecting(name, label string) string {
	ca := ""
	if len(w.CAPEM) > 0 {
		ca = ", caBundle: " + base64.StdEncoding.EncodeToString(w.CAPEM)
	}
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: %s}
webhooks:
- name: images.oomguard.io
  admissionReviewVersions: [v1]
  clientConfig: {url: %q%s}
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: Namespaced}
  - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [pods/ephemeralcontainers], scope: Namespaced}
  namespaceSelector:
    matchExpressions:
    - {key: %s, operator: In, values: [enabled]}
    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}
  failurePolicy: Ignore
  sideEffects: NoneOnDryRun
  timeoutSeconds: 10
  reinvocationPolicy: IfNeeded
`, name, w.URL, ca, label)
}

// Namespace is a namespace's manifest, opted in to the webhook or not.
func Namespace(name string, optIn bool) string {
	if optIn {
		return LabelledNamespace(name, Label)
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", name)
}

// LabelledNamespace is a namespace's manifest with label=enabled.
func LabelledNamespace(name, label string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {%s: enabled}\n", name, label)
}
