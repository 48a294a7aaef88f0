// Package podevents records Kubernetes Events on pods, as kubelet's
// recorder does for what it sees: one Event per pod, container and reason,
// its count raised and its message replaced on repeats (a burst of a
// hundred kills is one Event of count 100, written at most once a second),
// through the API server's core/v1 events API with the pod's service
// account, over kubeapi's small client rather than client-go's record
// package (kubeapi says why).
package podevents

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

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
)

// Pod is the object an Event is about.
type Pod struct{ Namespace, Name, UID string }

// Recorder aggregates Warning Events and writes them.
type Recorder struct {
	c         *kubeapi.Client
	component string // source.component and reportingController
	node      string // source.host and reportingInstance
	log       *slog.Logger
	now       func() time.Time

	mu      sync.Mutex
	pending map[key]*entry
	wake    chan struct{}
}

type key struct{ uid, container, reason string }

type entry struct {
	pod         Pod
	container   string
	reason      string
	message     string
	count       int
	first, last time.Time
	name        string // the Event's, once created
	written     int    // the count the API server has
}

// NewRecorder records as component on node.
func NewRecorder(c *kubeapi.Client, component, node string, log *slog.Logger) *Recorder {
	return &Recorder{c: c, component: component, node: node, log: log, now: time.Now, pending: map[key]*entry{}, wake: make(chan struct{}, 1)}
}

// Warning records a Warning Event about pod's container; it never blocks
// on the API server.
func (r *Recorder) Warning(pod Pod, container, reason, message string) {
	if len(message) > maxMessage {
		message = message[:maxMessage]
	}
	now := r.now()
	k := key{pod.UID, container, reason}
	r.mu.Lock()
	e := r.pending[k]
	if e == nil || now.Sub(e.last) > remember {
		if len(r.pending) >= maxPending {
			r.evictOldest()
		}
		e = &entry{pod: pod, container: container, reason: reason, first: now}
		r.pending[k] = e
	}
	e.count++
	e.message, e.last = message, now
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Recorder) evictOldest() {
	var oldest key
	var at time.Time
	for k, e := range r.pending {
		if at.IsZero() || e.last.Before(at) {
			oldest, at = k, e.last
		}
	}
	delete(r.pending, oldest)
}

// Run writes what was recorded, at most once a second, until ctx ends;
// then what is left, within stopFlush.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	defer func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopFlush)
		defer cancel()
		r.Flush(stop)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.Flush(ctx)
		select { // then no more often than flushEvery
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Flush writes every Event whose count the API server does not have yet.
func (r *Recorder) Flush(ctx context.Context) {
	r.mu.Lock()
	var dirty []entry
	var keys []key
	for k, e := range r.pending {
		if e.count != e.written {
			dirty, keys = append(dirty, *e), append(keys, k)
		}
	}
	r.mu.Unlock()
	for i, e := range dirty {
		name, err := r.write(ctx, e)
		if err != nil {
			r.log.Warn("writing an Event failed", "pod", e.pod.Namespace+"/"+e.pod.Name, "reason", e.reason, "err", err)
			continue
		}
		r.mu.Lock()
		if cur := r.pending[keys[i]]; cur != nil && cur.first.Equal(e.first) {
			cur.name, cur.written = name, e.count
		}
		r.mu.Unlock()
	}
}

// write creates e's Event, or raises its count; it returns the Event's name.
func (r *Recorder) write(ctx context.Context, e entry) (string, error) {
	path := "/api/v1/namespaces/" + e.pod.Namespace + "/events"
	if e.name != "" {
		patch := map[string]any{"count": e.count, "message": e.message, "lastTimestamp": e.last.UTC().Format(time.RFC3339)}
		err := r.c.Do(ctx, http.MethodPatch, path+"/"+e.name, "application/strategic-merge-patch+json", patch, nil)
		if kubeapi.Code(err) != http.StatusNotFound {
			return e.name, err
		}
		// The API server dropped it (events live an hour): a new one.
	}
	name := fmt.Sprintf("%s.%x", e.pod.Name, r.now().UnixNano())
	ev := map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata": map[string]any{"name": name, "namespace": e.pod.Namespace},
		"involvedObject": map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": e.pod.Namespace, "name": e.pod.Name,
			"uid": e.pod.UID, "fieldPath": "spec.containers{" + e.container + "}"},
		"type": "Warning", "reason": e.reason, "message": e.message, "count": e.count,
		"firstTimestamp": e.first.UTC().Format(time.RFC3339), "lastTimestamp": e.last.UTC().Format(time.RFC3339),
		"source":             map[string]any{"component": r.component, "host": r.node},
		"reportingComponent": r.component, "reportingInstance": r.node,
	}
	err := r.c.Do(ctx, http.MethodPost, path, "application/json", ev, nil)
	return name, err
}
