package podevents

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// clock is a test's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time             { return c.t }
func (c *clock) add(d time.Duration)        { c.t = c.t.Add(d) }
func fakeClock(r *Recorder) *clock          { c := &clock{time.Unix(1e9, 0)}; r.now = c.now; return c }
func (a *apiServer) count() int             { a.mu.Lock(); defer a.mu.Unlock(); return len(a.requests) }
func (a *apiServer) set(code int, r string) { a.mu.Lock(); a.code, a.retry = code, r; a.mu.Unlock() }

// One container killed again and again (1,000 kills a minute for an hour)
// is written as the EventCorrelator allows a kubelet: at most 25 writes,
// then one each 5 minutes; once quiet, its count is every kill.
func TestObjectBudget(t *testing.T) {
	r, api := newRecorder(t)
	c := fakeClock(r)
	pod := Pod{Namespace: "ml", Name: "trainer", UID: "u1"}
	for range 3600 { // an hour, a flush a second
		for range 17 {
			r.Warning(pod, "main", "OOMKilling", "killed")
		}
		r.Flush(context.Background())
		c.add(time.Second)
	}
	if n, most := api.count(), 25+12; n > most || n < 10 {
		t.Fatalf("%d writes in an hour, want at most the correlator's budget: 25 then one each 5 minutes (%d)", n, most)
	}
	c.add(quietAfter)
	r.Flush(context.Background())
	last := api.bodies[len(api.bodies)-1]
	if last["count"] != float64(3600*17) {
		t.Fatalf("once quiet, the last write's count is %v, want every kill: %d", last["count"], 3600*17)
	}
}

// A storm's writes space out as it lasts, keeping writes in the pod's
// budget for its end: the count of a storm of any length is written within
// seconds of its last kill.
func TestStormEndWritten(t *testing.T) {
	for _, storm := range []time.Duration{5 * time.Second, 30 * time.Second, 100 * time.Second, 10 * time.Minute} {
		r, api := newRecorder(t)
		c := fakeClock(r)
		pod := Pod{Namespace: "ml", Name: "oom-1", UID: "u1"}
		kills := 0
		for elapsed := time.Duration(0); elapsed < storm; elapsed += 500 * time.Millisecond {
			r.Warning(pod, "main", "OOMKilling", "killed")
			kills++
			r.Flush(context.Background())
			c.add(500 * time.Millisecond)
		}
		for range 3 { // the flushes after it, a second apart
			r.Flush(context.Background())
			c.add(time.Second)
		}
		last := api.bodies[len(api.bodies)-1]
		if last["count"] != float64(kills) || api.count() > objectBurst {
			t.Fatalf("a storm of %s: %d writes, the last of count %v, want %d within 3 s of its end", storm, api.count(), last["count"], kills)
		}
	}
}

// The node's bucket bounds its writes whatever the pods: a burst, then the
// rate; what waits is due when a token is.
func TestNodeBucket(t *testing.T) {
	r, api := newRecorderWith(t, Budget{QPS: 2, Burst: 5, Aggregate: 100})
	c := fakeClock(r)
	for i := range 20 {
		r.Warning(Pod{Namespace: "ml", Name: "p", UID: string(rune('a' + i))}, "main", "OOMKilling", "killed")
	}
	next := r.Flush(context.Background())
	if api.count() != 5 || next <= 0 || next > 500*time.Millisecond {
		t.Fatalf("%d writes, next due in %s: want the burst of 5, the next in ≤ 0.5 s", api.count(), next)
	}
	c.add(next)
	r.Flush(context.Background())
	if api.count() != 6 {
		t.Fatalf("%d writes after one token, want 6", api.count())
	}
	c.add(10 * time.Second)
	if r.Flush(context.Background()); api.count() != 11 {
		t.Fatalf("%d writes after 10 s, want the burst again (11)", api.count())
	}
}

// More pods at once than Aggregate: one Event on the node names them, its
// count every kill, its message within the API server's limit.
func TestAggregatesOnTheNode(t *testing.T) {
	r, api := newRecorder(t)
	fakeClock(r)
	for i := range 1000 {
		pod := Pod{Namespace: "ml", Name: "trainer-" + strings.Repeat("x", i%50), UID: string(rune(0x100 + i))}
		r.Warning(pod, "main", "OOMKilling", "killed")
		if i == 7 {
			r.Warning(pod, "main", "OOMKilling", "killed")
		}
	}
	r.Flush(context.Background())
	if len(api.requests) != 1 || api.requests[0] != "POST /api/v1/namespaces/default/events" {
		t.Fatalf("requests %v, want one Event on the node", api.requests)
	}
	ev := api.bodies[0]
	obj := ev["involvedObject"].(map[string]any)
	msg := ev["message"].(string)
	if obj["kind"] != "Node" || obj["name"] != "node-1" || ev["count"] != 1001.0 || len(msg) > maxMessage ||
		!strings.HasPrefix(msg, "1001 in 1000 containers at once") || !strings.Contains(msg, "×2") || !strings.Contains(msg, "more") {
		t.Fatalf("event %v (%d bytes)", ev, len(msg))
	}
	if got := testutil.ToFloat64(r.m.aggregated); got != 1001 {
		t.Fatalf("aggregated %v, want 1001", got)
	}
	r.Flush(context.Background())
	if len(api.requests) != 1 {
		t.Fatalf("the pods' Events were written after all: %v", api.requests)
	}
}

// 429 and 5xx back off, doubling and jittered, never sooner than
// Retry-After, and write nothing meanwhile: an overloaded server gets less,
// not more. Once it answers, writes resume and the backoff resets.
func TestBacksOff(t *testing.T) {
	r, api := newRecorder(t)
	c := fakeClock(r)
	api.set(http.StatusTooManyRequests, "7")
	for i := range 5 {
		r.Warning(Pod{Namespace: "ml", Name: "p", UID: string(rune('a' + i))}, "main", "OOMKilling", "killed")
	}
	next := r.Flush(context.Background())
	if api.count() != 1 || next < 7*time.Second {
		t.Fatalf("%d requests, next in %s: want one, then Retry-After's 7 s", api.count(), next)
	}
	c.add(6 * time.Second)
	if r.Flush(context.Background()); api.count() != 1 {
		t.Fatalf("wrote before Retry-After: %d requests", api.count())
	}
	// A minute of 500s, flushing each second: the waits double.
	api.set(http.StatusInternalServerError, "")
	c.add(time.Second)
	for range 60 {
		r.Warning(Pod{Namespace: "ml", Name: "p", UID: "a"}, "main", "OOMKilling", "killed")
		r.Flush(context.Background())
		c.add(time.Second)
	}
	if n := api.count(); n > 1+7 {
		t.Fatalf("%d requests in a minute of 500s: the backoff did not double", n)
	}
	if got := testutil.ToFloat64(r.m.failed.WithLabelValues("server")); got == 0 {
		t.Fatal("failures not counted")
	}
	api.set(0, "")
	c.add(5 * time.Minute)
	r.Flush(context.Background())
	if n := r.failures.Failures(); n != 0 {
		t.Fatalf("failures %d after a write went through", n)
	}
	for _, e := range r.pending {
		if e.count != e.written {
			t.Fatalf("%s not written after the server recovered", e.pod.UID)
		}
	}
}

// A refusal (403: the node-scoped policy, 422: an invalid Event) is final:
// the Event is dropped and counted, never retried.
func TestRefusedIsDropped(t *testing.T) {
	r, api := newRecorder(t)
	c := fakeClock(r)
	api.set(http.StatusForbidden, "")
	r.Warning(Pod{Namespace: "ml", Name: "p", UID: "u"}, "main", "OOMKilling", "killed")
	r.Warning(Pod{Namespace: "ml", Name: "p", UID: "u"}, "main", "OOMKilling", "killed")
	r.Flush(context.Background())
	c.add(time.Minute)
	r.Flush(context.Background())
	if api.count() != 1 {
		t.Fatalf("%d requests, want the one refused", api.count())
	}
	if got := testutil.ToFloat64(r.m.dropped.WithLabelValues("refused")); got != 2 {
		t.Fatalf("dropped %v, want 2", got)
	}
}
