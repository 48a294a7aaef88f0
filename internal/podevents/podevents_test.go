package podevents

import (
	"context"
	"encoding/json"
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

type apiServer struct {
	mu       sync.Mutex
	requests []string // METHOD PATH count
	bodies   []map[string]any
	gone     bool // PATCH answers 404
	code     int  // answers this (with retryAfter) when set
	retry    string
	protos   []string
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer tok" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	a.requests = append(a.requests, r.Method+" "+r.URL.Path)
	a.bodies = append(a.bodies, body)
	a.protos = append(a.protos, r.Proto)
	if a.code != 0 {
		if a.retry != "" {
			w.Header().Set("Retry-After", a.retry)
		}
		http.Error(w, `{"message":"busy"}`, a.code)
		return
	}
	if r.Method == http.MethodPatch && a.gone {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte("{}"))
}

func newRecorder(t *testing.T) (*Recorder, *apiServer) { return newRecorderWith(t, Budget{}) }

func newRecorderWith(t *testing.T, budget Budget) (*Recorder, *apiServer) {
	t.Helper()
	api := &apiServer{}
	srv := httptest.NewTLSServer(api)
	t.Cleanup(srv.Close)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := kubeapi.NewClient(srv.URL, tok, srv.Client().Transport.(*http.Transport).TLSClientConfig)
	return NewRecorder(c, "oomguard-nri", "node-1", budget, slog.New(slog.DiscardHandler)), api
}

// A burst is one Event whose count is the burst's; later repeats raise it
// (PATCH); an Event the API server dropped is created again.
func TestAggregates(t *testing.T) {
	r, api := newRecorder(t)
	pod := Pod{Namespace: "ml", Name: "trainer", UID: "u1"}
	for range 100 {
		r.Warning(pod, "main", "OOMKilling", "process 1 (python) was killed")
	}
	r.Warning(Pod{Namespace: "ml", Name: "other", UID: "u2"}, "main", "OOMKilling", "x")
	r.Flush(context.Background())
	if len(api.requests) != 2 {
		t.Fatalf("requests %v, want one POST per pod", api.requests)
	}
	var ev map[string]any
	for _, b := range api.bodies {
		if b["involvedObject"].(map[string]any)["name"] == "trainer" {
			ev = b
		}
	}
	obj := ev["involvedObject"].(map[string]any)
	if ev["count"] != 100.0 || ev["type"] != "Warning" || ev["reason"] != "OOMKilling" || obj["uid"] != "u1" || obj["kind"] != "Pod" ||
		obj["fieldPath"] != "spec.containers{main}" || ev["source"].(map[string]any)["host"] != "node-1" {
		t.Fatalf("event %v", ev)
	}
	r.Flush(context.Background())
	if len(api.requests) != 2 {
		t.Fatalf("a flush with nothing new wrote: %v", api.requests)
	}
	r.Warning(pod, "main", "OOMKilling", "process 2 (python) was killed")
	r.Flush(context.Background())
	last := api.bodies[len(api.bodies)-1]
	if !strings.HasPrefix(api.requests[2], "PATCH /api/v1/namespaces/ml/events/trainer.") || last["count"] != 101.0 || last["message"] != "process 2 (python) was killed" {
		t.Fatalf("repeat: %v %v", api.requests, last)
	}
	api.gone = true
	r.Warning(pod, "main", "OOMKilling", "process 3 (python) was killed")
	r.Flush(context.Background())
	if n := len(api.requests); api.requests[n-1] != "POST /api/v1/namespaces/ml/events" {
		t.Fatalf("after a 404: %v", api.requests)
	}
}

// The recorder's memory is bounded whatever the pods; messages too.
func TestBounded(t *testing.T) {
	r, _ := newRecorder(t)
	for i := range maxPending + 50 {
		r.Warning(Pod{Namespace: "ns", Name: "p", UID: string(rune('a'+i%26)) + strings.Repeat("x", i)}, "c", "OOMKilling", strings.Repeat("m", 5000))
	}
	if len(r.pending) > maxPending {
		t.Fatalf("%d pending, bound %d", len(r.pending), maxPending)
	}
	for _, e := range r.pending {
		if len(e.message) > maxMessage {
			t.Fatalf("message of %d bytes", len(e.message))
		}
	}
}

// Run writes within about a second of a Warning, and not more often.
func TestRunWrites(t *testing.T) {
	r, api := newRecorder(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	r.Warning(Pod{Namespace: "ml", Name: "p", UID: "u"}, "main", "OOMKilling", "m")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		api.mu.Lock()
		n := len(api.requests)
		api.mu.Unlock()
		if n == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("nothing written")
}

// What was recorded in the last second before the plugin stops is written
// as it stops: its successor on the node (a rollout, a restart) reports
// only the kills after it, so an Event left unwritten would be lost.
func TestRunWritesWhatIsLeftWhenItStops(t *testing.T) {
	r, api := newRecorder(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	pod := Pod{Namespace: "ml", Name: "p", UID: "u"}
	r.Warning(pod, "main", "OOMKilling", "m")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		api.mu.Lock()
		n := len(api.requests)
		api.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing written")
		}
	}
	r.Warning(pod, "main", "OOMKilling", "m") // within the second: waits for the next write
	cancel()
	<-done
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.requests) != 2 || api.requests[1] != "PATCH /api/v1/namespaces/ml/events/"+r.pending[key{pod.UID, "main", "OOMKilling"}].name {
		t.Fatalf("requests %q: the second kill's count was not written as the recorder stopped", api.requests)
	}
}
