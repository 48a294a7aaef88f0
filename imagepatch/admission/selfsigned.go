package admission

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/oomguard/oomguard/internal/kubeapi"
)

// SelfSigned is TLS without cert-manager: the webhook makes its CA and
// serving certificate, keeps them in one Secret that every replica shares
// (the first to write wins; the others take what it wrote), writes the CA
// bundle into its MutatingWebhookConfiguration's caBundle, and renews both
// in the last third of their life. The Secret is owned by the webhook
// configuration, so it goes when the chart's objects go.
type SelfSigned struct {
	API               *kubeapi.Client
	Namespace, Secret string
	Webhook           string   // the MutatingWebhookConfiguration's name
	Hosts             []string // what the serving certificate names
	Validity          time.Duration
	Log               *slog.Logger
	Metrics           *Metrics

	cert atomic.Pointer[tls.Certificate]
}

// GetCertificate serves the pair last made or read (tls.Config).
func (s *SelfSigned) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// Run keeps the certificates until ctx ends: checked every tenth of their
// validity (an hour at most), again after 5 seconds while a step fails.
func (s *SelfSigned) Run(ctx context.Context) {
	every := min(s.Validity/10, time.Hour)
	for {
		wait := every
		if err := s.Reconcile(ctx); err != nil {
			s.Log.Warn("keeping the webhook's certificates failed; trying again", "secret", s.Namespace+"/"+s.Secret,
				"webhookConfiguration", s.Webhook, "err", err)
			wait = min(every, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	OwnerReferences []ownerReference  `json:"ownerReferences,omitempty"`
}

type ownerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

type secret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   objectMeta        `json:"metadata"`
	Type       string            `json:"type"`
	Data       map[string][]byte `json:"data"`
}

type webhookConfiguration struct {
	Metadata objectMeta `json:"metadata"`
	Webhooks []struct {
		ClientConfig struct {
			CABundle []byte `json:"caBundle"`
		} `json:"clientConfig"`
	} `json:"webhooks"`
}

// Reconcile makes or renews what needs it, writes the Secret (read again
// and redone if another replica wrote first), puts its bundle into the
// webhook configuration, and only then serves the pair.
func (s *SelfSigned) Reconcile(ctx context.Context) error {
	cfgPath := "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" + s.Webhook
	var cfg webhookConfiguration
	if err := s.API.Do(ctx, http.MethodGet, cfgPath, "", nil, &cfg); err != nil {
		return fmt.Errorf("reading the webhook configuration %s: %w", s.Webhook, err)
	}
	owner := ownerReference{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration", Name: s.Webhook, UID: cfg.Metadata.UID}
	secPath := "/api/v1/namespaces/" + s.Namespace + "/secrets"
	var kp keyPair
	for attempt := 0; ; attempt++ {
		var cur secret
		err := s.API.Do(ctx, http.MethodGet, secPath+"/"+s.Secret, "", nil, &cur)
		exists := err == nil
		if err != nil && kubeapi.Code(err) != http.StatusNotFound {
			return fmt.Errorf("reading the Secret %s/%s: %w", s.Namespace, s.Secret, err)
		}
		kp = keyPair{Bundle: cur.Data[keyBundle], CAKey: cur.Data[keyCAKey], Cert: cur.Data[keyCert], Key: cur.Data[keyKey]}
		next, why, err := renew(kp, s.Hosts, s.Validity, time.Now())
		if err != nil {
			return fmt.Errorf("making the webhook's certificates: %w", err)
		}
		owned := len(cur.Metadata.OwnerReferences) == 1 && cur.Metadata.OwnerReferences[0] == owner
		if why == "" && owned {
			break
		}
		if why == "" {
			why = "its owner is not the webhook configuration"
		}
		out := secret{APIVersion: "v1", Kind: "Secret", Type: "kubernetes.io/tls",
			Metadata: objectMeta{Name: s.Secret, Namespace: s.Namespace, ResourceVersion: cur.Metadata.ResourceVersion,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "oomguard-imagepatch-webhook"}, OwnerReferences: []ownerReference{owner}},
			Data: map[string][]byte{keyBundle: next.Bundle, keyCAKey: next.CAKey, keyCert: next.Cert, keyKey: next.Key}}
		if exists {
			err = s.API.Do(ctx, http.MethodPut, secPath+"/"+s.Secret, "application/json", out, nil)
		} else {
			err = s.API.Do(ctx, http.MethodPost, secPath, "application/json", out, nil)
		}
		if code := kubeapi.Code(err); (code == http.StatusConflict) && attempt < 3 {
			continue // another replica wrote first: take what it wrote
		}
		if err != nil {
			s.Metrics.certRenewal("failed")
			return fmt.Errorf("writing the Secret %s/%s: %w", s.Namespace, s.Secret, err)
		}
		s.Metrics.certRenewal("renewed")
		s.Log.Info("renewed the webhook's certificates", "secret", s.Namespace+"/"+s.Secret, "why", why)
		kp = next
		break
	}
	if err := s.injectBundle(ctx, cfgPath, cfg, kp.Bundle); err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(kp.Cert, kp.Key)
	if err != nil {
		return fmt.Errorf("the Secret %s/%s's serving pair: %w", s.Namespace, s.Secret, err)
	}
	if old := s.cert.Load(); old == nil || old.Leaf.SerialNumber.Cmp(pair.Leaf.SerialNumber) != 0 {
		s.Log.Info("serving a certificate", "serial", pair.Leaf.SerialNumber.Text(16), "notAfter", pair.Leaf.NotAfter.UTC())
	}
	s.cert.Store(&pair)
	s.Metrics.certExpiry.Set(float64(pair.Leaf.NotAfter.Unix()))
	return nil
}

// injectBundle writes bundle into each webhook's caBundle that differs, on
// the configuration as it was read (a test of its resourceVersion).
func (s *SelfSigned) injectBundle(ctx context.Context, path string, cfg webhookConfiguration, bundle []byte) error {
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": cfg.Metadata.ResourceVersion}}
	for i, w := range cfg.Webhooks {
		if !sameBundle(w.ClientConfig.CABundle, bundle) {
			ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": base64.StdEncoding.EncodeToString(bundle)})
		}
	}
	if len(ops) == 1 {
		return nil
	}
	if err := s.API.Do(ctx, http.MethodPatch, path, "application/json-patch+json", ops, nil); err != nil {
		return fmt.Errorf("writing the CA bundle into the webhook configuration %s: %w", s.Webhook, err)
	}
	s.Log.Info("wrote the CA bundle into the webhook configuration", "webhookConfiguration", s.Webhook, "webhooks", len(ops)-1)
	return nil
}
