package admission

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/kubeapi"
)

// fakeAPI holds one Secret and one webhook configuration; another replica
// writes the Secret first when the first POST comes.
type fakeAPI struct {
	mu      sync.Mutex
	secret  *secret
	bundle  []byte
	rival   keyPair
	patches int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	switch {
	case strings.HasPrefix(r.URL.Path, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/hook") && r.Method == http.MethodGet:
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": "hook", "uid": "u1", "resourceVersion": "7"},
			"webhooks": []any{map[string]any{"clientConfig": map[string]any{"caBundle": f.bundle}}}})
	case strings.HasPrefix(r.URL.Path, "/apis/") && r.Method == http.MethodPatch:
		var ops []struct {
			Op, Path string
			Value    any
		}
		json.Unmarshal(body, &ops)
		if len(ops) != 2 || ops[0].Op != "test" || ops[0].Value != "7" || ops[1].Path != "/webhooks/0/clientConfig/caBundle" {
			http.Error(w, string(body), http.StatusUnprocessableEntity)
			return
		}
		f.bundle, _ = base64.StdEncoding.DecodeString(ops[1].Value.(string))
		f.patches++
	case r.URL.Path == "/api/v1/namespaces/ns/secrets/tls" && r.Method == http.MethodGet:
		if f.secret == nil {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(f.secret)
	case r.URL.Path == "/api/v1/namespaces/ns/secrets" && r.Method == http.MethodPost:
		f.secret = &secret{Metadata: objectMeta{Name: "tls", ResourceVersion: "1",
			OwnerReferences: []ownerReference{{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration", Name: "hook", UID: "u1"}}},
			Data: map[string][]byte{keyBundle: f.rival.Bundle, keyCAKey: f.rival.CAKey, keyCert: f.rival.Cert, keyKey: f.rival.Key}}
		http.Error(w, `{"message":"already exists"}`, http.StatusConflict)
	default:
		http.Error(w, r.Method+" "+r.URL.Path, http.StatusNotFound)
	}
}

// Two replicas start at once: the one that loses the Secret's creation
// serves what the other wrote, and puts that CA into the configuration.
func TestSelfSignedLosesTheRace(t *testing.T) {
	hosts := []string{"hook.ns.svc"}
	rival, _, err := renew(keyPair{}, hosts, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	api := &fakeAPI{rival: rival}
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("t"), 0o600)
	s := &SelfSigned{API: kubeapi.NewClient(srv.URL, tok, srv.Client().Transport.(*http.Transport).TLSClientConfig),
		Namespace: "ns", Secret: "tls", Webhook: "hook", Hosts: hosts, Validity: time.Hour, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()}
	if _, err := s.GetCertificate(nil); err == nil {
		t.Fatal("a certificate before the first reconcile")
	}
	if err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := s.GetCertificate(nil)
	if b, _ := pem.Decode(rival.Cert); err != nil || string(c.Certificate[0]) != string(b.Bytes) {
		t.Fatalf("serving another pair than the Secret's: %v", err)
	}
	if string(api.bundle) != string(rival.Bundle) || api.patches != 1 {
		t.Fatalf("the configuration's bundle is not the rival's (%d patches)", api.patches)
	}
	if err := s.Reconcile(context.Background()); err != nil || api.patches != 1 {
		t.Fatalf("a second reconcile: %v, %d patches (want none more)", err, api.patches)
	}
}
