// Package podevents records Kubernetes Events on pods, as kubelet's
// recorder does for what it sees: one Event per pod, container and reason,
// its count raised and its message replaced on repeats (a burst of a
// hundred kills is one Event of count 100, written at most once a second),
// through the API server's core/v1 events API with the pod's service
// account. It is a small client rather than client-go's record package:
// the plugin runs on every node, and client-go's recorder with its clientset
// makes it 2.5 times the size (28.7 MB against 11.4 MB, measured).
package podevents

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/oomguard/oomguard/internal/safeio"
)

// Where a pod's service account is mounted.
const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// Bounds: the API server is a shared resource, and kills can come in floods.
const (
	flushEvery  = time.Second
	maxPending  = 1024 // pods×containers×reasons remembered; the oldest go
	requestTime = 10 * time.Second
	maxMessage  = 1024 // the API server's own limit is 1 KiB of note for events.k8s.io
	remember    = 10 * time.Minute
)

// Pod is the object an Event is about.
type Pod struct{ Namespace, Name, UID string }

// Client talks to the API server.
type Client struct {
	server    string
	tokenFile string
	http      *http.Client
}

// InCluster makes a client with the pod's service account; server is the
// API server's URL, or "" for the one the pod's environment names.
func InCluster(server string) (*Client, error) {
	if server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("no API server: KUBERNETES_SERVICE_HOST is not set and no address was given")
		}
		server = "https://" + net.JoinHostPort(host, port)
	}
	ca, err := safeio.ReadFile(serviceAccount+"/ca.crt", 1<<20)
	if err != nil {
		return nil, fmt.Errorf("the service account's CA (automountServiceAccountToken must be on): %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s/ca.crt holds no certificate", serviceAccount)
	}
	return NewClient(server, serviceAccount+"/token", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), nil
}

// NewClient makes a client for server, authenticating with the bearer token
// in tokenFile (read at each request: projected tokens rotate).
func NewClient(server, tokenFile string, tc *tls.Config) *Client {
	tr := &http.Transport{TLSClientConfig: tc, MaxIdleConns: 2, IdleConnTimeout: time.Minute, ResponseHeaderTimeout: requestTime}
	return &Client{server: strings.TrimSuffix(server, "/"), tokenFile: tokenFile, http: &http.Client{Transport: tr, Timeout: requestTime}}
}

func (c *Client) do(ctx context.Context, method, path, ctype string, body any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	tok, err := safeio.ReadFile(c.tokenFile, 64<<10)
	if err != nil {
		return 0, fmt.Errorf("the service account's token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	return resp.StatusCode, nil
}

// Recorder aggregates Warning Events and writes them.
type Recorder struct {
	c         *Client
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
func NewRecorder(c *Client, component, node string, log *slog.Logger) *Recorder {
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

// Run writes what was recorded, at most once a second, until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
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
		code, err := r.c.do(ctx, http.MethodPatch, path+"/"+e.name, "application/strategic-merge-patch+json", patch)
		if code != http.StatusNotFound {
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
	_, err := r.c.do(ctx, http.MethodPost, path, "application/json", ev)
	return name, err
}
