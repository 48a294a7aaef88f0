// Package podevents records Kubernetes Events on pods, as kubelet's
// recorder does for what it sees: one Event per pod, container and reason,
// its count raised and its message replaced on repeats, through the API
// server's core/v1 events API with the pod's service account, over
// kubeapi's small client rather than client-go's record package (kubeapi
// says why). What it writes is budgeted as client-go's EventCorrelator
// budgets a kubelet's, for a fleet's nodes share one API server: per pod
// 25 writes, then one each 5 minutes, repeats raising the count meanwhile;
// per node a token bucket (1 a second, burst 25); more pods at once than
// Budget.Aggregate, one Event on the node instead of one each; a 429 or
// 5xx backs off, jittered, never sooner than Retry-After. Within a pod's
// budget, a storm's writes space out as it lasts (a second apart for the
// first 10, then doubling), so that the storm's last count, written once
// it is quiet, finds a write left.
package podevents

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oomguard/oomguard/internal/backoff"
	"github.com/oomguard/oomguard/internal/kubeapi"
)

// Bounds: the API server is a shared resource, and kills can come in floods.
const (
	flushEvery = time.Second
	// stopFlush bounds the last write, when the recorder stops.
	stopFlush  = 2 * time.Second
	maxPending = 1024 // pods×containers×reasons remembered; the oldest go
	maxMessage = 1024 // the API server's own limit is 1 KiB of note for events.k8s.io
	remember   = 10 * time.Minute
	// Per pod (the EventCorrelator's spam filter: defaultSpamBurst, defaultSpamQPS).
	objectBurst = 25
	objectEvery = 5 * time.Minute
	// A pod's Events quiet this long are written whatever the spacing.
	quietAfter = 2 * time.Second
)

// spacing is the least time between two writes of one pod's Events while
// they keep coming, given the writes left in its budget: none for the first
// 10, then doubling from 2 s, up to the budget's own refill.
func spacing(left float64) time.Duration {
	if left >= objectBurst-10 {
		return 0
	}
	return min(time.Second<<int(objectBurst-10-left+1), objectEvery)
}

// Budget is what a node's recorder may write; a zero field is its default.
type Budget struct {
	// QPS and Burst bound the node's writes (1 a second, burst 25).
	QPS   float64
	Burst int
	// Aggregate: more pods than this due in one write, one Event on the
	// node names them instead (10).
	Aggregate int
}

func (b Budget) every() time.Duration { return time.Duration(float64(time.Second) / b.QPS) }

// Pod is the object an Event is about.
type Pod struct{ Namespace, Name, UID string }

// Recorder aggregates Warning Events and writes them within its budget.
type Recorder struct {
	c         *kubeapi.Client
	component string // source.component and reportingController
	node      string // source.host and reportingInstance
	log       *slog.Logger
	now       func() time.Time
	budget    Budget
	m         metrics

	mu       sync.Mutex
	pending  map[key]*entry
	objects  map[object]*objectBudget // each pod's, while it is not full
	nodeB    bucket
	failures backoff.Backoff // writes failed in a row
	retryAt  time.Time       // no write before
	wake     chan struct{}
}

type key struct{ uid, container, reason string }

// object is what the per-object budget counts: an Event's involved object and reason.
type object struct{ uid, reason string }

type objectBudget struct {
	bucket
	last time.Time // written
}

type entry struct {
	pod         Pod
	node        bool // about the node, not a pod (Pod is then empty)
	container   string
	reason      string
	message     string
	count       int
	first, last time.Time
	name        string // the Event's, once created
	written     int    // the count the API server has
}

func (e *entry) object() object { return object{e.pod.UID, e.reason} }

type metrics struct {
	written, aggregated prometheus.Counter
	dropped, failed     *prometheus.CounterVec
}

// NewRecorder records as component on node, within budget.
func NewRecorder(c *kubeapi.Client, component, node string, budget Budget, log *slog.Logger) *Recorder {
	budget.QPS = cmp.Or(budget.QPS, 1)
	budget.Burst = cmp.Or(budget.Burst, 25)
	budget.Aggregate = cmp.Or(budget.Aggregate, 10)
	r := &Recorder{c: c, component: component, node: node, log: log, now: time.Now, budget: budget,
		nodeB:    bucket{burst: budget.Burst, per: budget.every()},
		failures: backoff.Backoff{Base: time.Second, Max: 5 * time.Minute},
		pending:  map[key]*entry{}, objects: map[object]*objectBudget{}, wake: make(chan struct{}, 1)}
	r.m = metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_events_written_total",
			Help: "Event writes (create or count raised) the API server took."}),
		aggregated: prometheus.NewCounter(prometheus.CounterOpts{Name: "oomguard_events_aggregated_total",
			Help: "Occurrences of pods' Events told in one Event on the node instead: too many pods at once."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_events_dropped_total",
			Help: "Occurrences of Events never written, by reason: refused (the API server refused the Event: its log says why), overflow (more pods than the recorder remembers), stopped (unwritten when the plugin stopped). The kills are still logged and counted."},
			[]string{"reason"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "oomguard_event_write_failures_total",
			Help: "Event writes that failed and are tried again after a backoff, by reason: throttled (429), server (5xx), unreachable."},
			[]string{"reason"}),
	}
	for _, why := range []string{"refused", "overflow", "stopped"} {
		r.m.dropped.WithLabelValues(why)
	}
	for _, why := range []string{"throttled", "server", "unreachable"} {
		r.m.failed.WithLabelValues(why)
	}
	return r
}

// Collectors are the recorder's counters, to register.
func (r *Recorder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.m.written, r.m.aggregated, r.m.dropped, r.m.failed}
}

// Warning records a Warning Event about pod's container; it never blocks
// on the API server.
func (r *Recorder) Warning(pod Pod, container, reason, message string) {
	r.mu.Lock()
	r.record(key{pod.UID, container, reason}, func(e *entry) { e.pod, e.container, e.reason = pod, container, reason }, message, 1)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// record adds n occurrences to k's entry, made by fill when new; r.mu is held.
func (r *Recorder) record(k key, fill func(*entry), message string, n int) *entry {
	if len(message) > maxMessage {
		message = message[:maxMessage]
	}
	now := r.now()
	e := r.pending[k]
	if e == nil || (e.count == e.written && now.Sub(e.last) > remember) {
		if e == nil && len(r.pending) >= maxPending {
			r.evictOldest()
		}
		e = &entry{first: now}
		fill(e)
		r.pending[k] = e
	}
	e.count += n
	e.message, e.last = message, now
	return e
}

func (r *Recorder) evictOldest() {
	var oldest key
	var at time.Time
	for k, e := range r.pending {
		if at.IsZero() || e.last.Before(at) {
			oldest, at = k, e.last
		}
	}
	if e := r.pending[oldest]; e != nil && e.count > e.written {
		r.m.dropped.WithLabelValues("overflow").Add(float64(e.count - e.written))
	}
	delete(r.pending, oldest)
}

// Run writes what was recorded, at most once a second and within the
// budget, until ctx ends; then what is left, within stopFlush.
func (r *Recorder) Run(ctx context.Context) {
	defer func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopFlush)
		defer cancel()
		r.Flush(stop)
		r.mu.Lock()
		for _, e := range r.pending {
			if e.count > e.written {
				r.m.dropped.WithLabelValues("stopped").Add(float64(e.count - e.written))
			}
		}
		r.mu.Unlock()
	}()
	due := time.NewTimer(time.Hour)
	due.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-due.C:
		}
		next := r.Flush(ctx)
		select { // then no more often than flushEvery
		case <-ctx.Done():
			return
		case <-time.After(flushEvery):
		}
		if next > 0 {
			due.Reset(max(next-flushEvery, 0))
		}
	}
}

// Flush writes, within the budget, every Event whose count the API server
// does not have yet; it returns how long until what it left is due (0:
// nothing left).
func (r *Recorder) Flush(ctx context.Context) time.Duration {
	now := r.now()
	r.mu.Lock()
	if now.Before(r.retryAt) {
		defer r.mu.Unlock()
		return r.retryAt.Sub(now)
	}
	var later time.Duration
	due := map[key]*entry{}
	pods := map[string]bool{}
	for k, e := range r.pending {
		if e.count == e.written {
			continue
		}
		if b := r.objects[e.object()]; b != nil {
			w := b.wait(now)
			if quiet := e.last.Add(quietAfter); now.Before(quiet) {
				w = max(w, b.last.Add(spacing(b.tokens)).Sub(now))
				w = min(w, quiet.Sub(now)) // looked at again once quiet
			}
			if w > 0 {
				later = minDue(later, w)
				continue
			}
		}
		due[k] = e
		if !e.node {
			pods[e.pod.UID] = true
		}
	}
	if len(pods) > r.budget.Aggregate {
		r.aggregate(due)
	}
	type pending struct {
		k key
		e entry // a copy: written without the lock
	}
	var batch []pending
	for k, e := range due {
		batch = append(batch, pending{k, *e})
	}
	r.mu.Unlock()
	slices.SortFunc(batch, func(a, b pending) int { return a.e.first.Compare(b.e.first) })
	for _, p := range batch {
		e := p.e
		r.mu.Lock()
		ob := r.objects[e.object()]
		if ob == nil {
			ob = &objectBudget{bucket: bucket{burst: objectBurst, per: objectEvery}}
			r.objects[e.object()] = ob
		}
		if w := ob.wait(now); w > 0 { // another of its containers took the last
			r.mu.Unlock()
			later = minDue(later, w)
			continue
		}
		if w := r.nodeB.wait(now); w > 0 {
			r.mu.Unlock()
			return minDue(later, w)
		}
		r.nodeB.take(now)
		ob.take(now)
		ob.last = now
		r.mu.Unlock()
		name, err := r.write(ctx, e)
		if wait, stop := r.wrote(p.k, e, name, err); stop {
			return wait
		}
	}
	r.mu.Lock()
	for o, b := range r.objects { // a full bucket is as good as none
		if b.full(now) {
			delete(r.objects, o)
		}
	}
	r.mu.Unlock()
	return later
}

// wrote settles one write: the count written, the entry given up on a
// refusal, or a backoff (stop: no more writes now, the wait returned).
func (r *Recorder) wrote(k key, e entry, name string, err error) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.pending[k]
	if cur != nil && !cur.first.Equal(e.first) {
		cur = nil // replaced meanwhile
	}
	code := kubeapi.Code(err)
	switch {
	case err == nil:
		r.failures.Succeeded()
		r.m.written.Inc()
		if cur != nil {
			cur.name, cur.written = name, e.count
		}
		return 0, false
	case code == 0 || code == http.StatusTooManyRequests || code >= 500:
		why := "unreachable"
		switch {
		case code == http.StatusTooManyRequests:
			why = "throttled"
		case code >= 500:
			why = "server"
		}
		r.m.failed.WithLabelValues(why).Inc()
		wait := r.failures.Failed(kubeapi.RetryAfter(err))
		r.retryAt = r.now().Add(wait)
		if n := r.failures.Failures(); n == 1 || n%10 == 0 { // a log line a backoff's start, not a write
			r.log.Warn("the API server did not take an Event; backing off", "failures", n, "retry_in", wait.Round(time.Millisecond), "err", err)
		}
		return wait, true
	default:
		r.log.Warn("the API server refused an Event; dropping it", "object", e.describe(), "reason", e.reason, "err", err)
		r.m.dropped.WithLabelValues("refused").Add(float64(e.count - e.written))
		if cur != nil {
			cur.written = cur.count
		}
		return 0, false
	}
}

// aggregate folds the due pods' Events into one on the node for each
// reason, the pods with the most occurrences named first; r.mu is held.
func (r *Recorder) aggregate(due map[key]*entry) {
	byReason := map[string][]*entry{}
	for k, e := range due {
		if !e.node {
			byReason[e.reason] = append(byReason[e.reason], e)
			delete(due, k)
		}
	}
	for reason, es := range byReason {
		slices.SortFunc(es, func(a, b *entry) int {
			return cmp.Or(cmp.Compare(b.count-b.written, a.count-a.written), a.first.Compare(b.first))
		})
		occ := 0
		var names []string
		for _, e := range es {
			n := e.count - e.written
			occ += n
			name := e.pod.Namespace + "/" + e.pod.Name + " (" + e.container + ")"
			if n > 1 {
				name += fmt.Sprintf(" ×%d", n)
			}
			names = append(names, name)
			e.written = e.count
		}
		r.m.aggregated.Add(float64(occ))
		var b strings.Builder
		fmt.Fprintf(&b, "%d in %d containers at once, too many for an Event each: ", occ, len(es))
		for i, name := range names {
			rest := fmt.Sprintf("; and %d more", len(names)-i)
			if b.Len()+len(name)+2+len(rest) > maxMessage {
				b.WriteString(rest)
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(name)
		}
		k := key{"node/" + r.node, "", reason}
		due[k] = r.record(k, func(e *entry) { e.node, e.pod, e.reason = true, Pod{Name: r.node, UID: r.node}, reason }, b.String(), occ)
	}
}

func (e *entry) describe() string {
	if e.node {
		return "this node"
	}
	return e.pod.Namespace + "/" + e.pod.Name
}

func minDue(a, b time.Duration) time.Duration {
	if a == 0 {
		return b
	}
	return min(a, b)
}

// write creates e's Event, or raises its count; it returns the Event's name.
func (r *Recorder) write(ctx context.Context, e entry) (string, error) {
	// An Event about a node is in the default namespace, its object's UID
	// the node's name, as kubelet writes its own.
	ns, obj := e.pod.Namespace, map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": e.pod.Namespace, "name": e.pod.Name,
		"uid": e.pod.UID, "fieldPath": "spec.containers{" + e.container + "}"}
	if e.node {
		ns, obj = "default", map[string]any{"kind": "Node", "name": e.pod.Name, "uid": e.pod.UID}
	}
	path := "/api/v1/namespaces/" + url.PathEscape(ns) + "/events"
	if e.name != "" {
		patch := map[string]any{"count": e.count, "message": e.message, "lastTimestamp": e.last.UTC().Format(time.RFC3339)}
		err := r.c.Do(ctx, http.MethodPatch, path+"/"+url.PathEscape(e.name), "application/strategic-merge-patch+json", patch, nil)
		if kubeapi.Code(err) != http.StatusNotFound {
			return e.name, err
		}
		// The API server dropped it (events live an hour): a new one.
	}
	name := fmt.Sprintf("%s.%x", e.pod.Name, r.now().UnixNano())
	ev := map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata":       map[string]any{"name": name, "namespace": ns},
		"involvedObject": obj,
		"type":           "Warning", "reason": e.reason, "message": e.message, "count": e.count,
		"firstTimestamp": e.first.UTC().Format(time.RFC3339), "lastTimestamp": e.last.UTC().Format(time.RFC3339),
		"source":             map[string]any{"component": r.component, "host": r.node},
		"reportingComponent": r.component, "reportingInstance": r.node,
	}
	err := r.c.Do(ctx, http.MethodPost, path, "application/json", ev, nil)
	return name, err
}
