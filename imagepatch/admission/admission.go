// Package admission is a mutating admission webhook that runs pods on their
// patched images: for each container whose image the webhook selects, the
// image becomes the patched one in the same repository, pinned by digest,
// and a command the pod sets gets the patch's entrypoint prefix (the shim)
// in front of it. It never refuses a pod: whatever goes wrong, the pod is
// admitted as it came. Everything in a review is hostile input.
package admission

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/internal/escape"
)

// AnnotationOriginal records, on a mutated pod, each changed container's
// image as the pod named it: {"container": "image"}.
const AnnotationOriginal = "oomguard.io/original-images"

// AnnotationOptOut set to "false" on a pod leaves it alone.
const AnnotationOptOut = "oomguard.io/patch-images"

// MaxReview bounds a review's body: a pod is at most what etcd stores (1.5 MiB), twice.
const MaxReview = 3 << 20

// MaxInFlight bounds the bytes of the reviews being read and answered at
// once (by their Content-Length, MaxReview when unknown): nearly three of
// the largest, or a thousand ordinary pods'. A review past it is refused
// at once, unread, and the API server admits the pod as failurePolicy says.
const MaxInFlight = 8 << 20

// Resolver is what the webhook asks for patched images (imagepatch.Resolver).
type Resolver interface {
	Resolve(ctx context.Context, ref name.Reference) imagepatch.Resolution
	Cached(ref name.Reference) (imagepatch.Resolution, bool)
}

// Config is the webhook's policy.
type Config struct {
	// Images are globs over repositories ("registry.example/base/*"),
	// matched as path.Match matches; a container's image in none is left alone.
	Images []string
	// Skip are namespaces never mutated: kube-system and the webhook's own.
	Skip []string
	// Deadline bounds the wait for patches in one review; past it the pod
	// is admitted with the images not yet patched, and they finish later.
	Deadline time.Duration
	// Prefix is the patch's entrypoint prefix: put in front of a command a
	// pod sets (which replaces the image's entrypoint, the shim with it).
	Prefix []string
	// InitPrefix is the patch's other entrypoint prefix (the shim under the
	// name podman's systemd mode looks for): a command that starts with it
	// has the shim already.
	InitPrefix []string
	// NameOptions parse images (name.Insecure for a plain-HTTP registry).
	NameOptions []name.Option
}

// Handler serves AdmissionReview requests.
type Handler struct {
	cfg Config
	r   Resolver
	log *slog.Logger
	m   *Metrics

	mu       sync.Mutex
	inFlight int64 // review bytes being read and answered
}

// New makes a Handler.
func New(cfg Config, r Resolver, log *slog.Logger, m *Metrics) *Handler {
	cfg.Skip = append(slices.Clone(cfg.Skip), "kube-system")
	return &Handler{cfg: cfg, r: r, log: log, m: m}
}

// review is admission.k8s.io/v1 AdmissionReview, the fields used.
type review struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Request    *request  `json:"request,omitempty"`
	Response   *response `json:"response,omitempty"`
}

type request struct {
	UID         string          `json:"uid"`
	Kind        groupKind       `json:"kind"`
	SubResource string          `json:"subResource"`
	Namespace   string          `json:"namespace"`
	Operation   string          `json:"operation"`
	DryRun      bool            `json:"dryRun"`
	Object      json.RawMessage `json:"object"`
	OldObject   json.RawMessage `json:"oldObject"`
}

type groupKind struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
}

type response struct {
	UID       string   `json:"uid"`
	Allowed   bool     `json:"allowed"`
	PatchType string   `json:"patchType,omitempty"`
	Patch     []byte   `json:"patch,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

type pod struct {
	Metadata struct {
		Name         string            `json:"name"`
		GenerateName string            `json:"generateName"`
		Annotations  map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers          []container `json:"containers"`
		InitContainers      []container `json:"initContainers"`
		EphemeralContainers []container `json:"ephemeralContainers"`
	} `json:"spec"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
}

// op is one JSON Patch operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	if req.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	size := req.ContentLength
	if size < 0 || size > MaxReview {
		size = MaxReview
	}
	if !h.take(size) {
		h.m.reviews.WithLabelValues("busy").Inc()
		w.Header().Set("Connection", "close")
		http.Error(w, "too many review bytes in flight; the pod is admitted as the webhook's failurePolicy says", http.StatusTooManyRequests)
		return
	}
	defer h.give(size)
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxReview))
	if err != nil {
		h.m.reviews.WithLabelValues("invalid").Inc()
		http.Error(w, "reading the review: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), h.cfg.Deadline)
	defer cancel()
	out, result, err := h.Review(ctx, body)
	if err != nil {
		// The API server applies the webhook's failurePolicy (Ignore): the pod is created unchanged.
		h.m.reviews.WithLabelValues("invalid").Inc()
		h.log.Warn("refusing a malformed admission review", "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.m.reviews.WithLabelValues(result).Inc()
	h.m.latency.Observe(time.Since(start).Seconds())
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// take reserves n of MaxInFlight, or says there is not that much left.
func (h *Handler) take(n int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inFlight+n > MaxInFlight {
		return false
	}
	h.inFlight += n
	return true
}

func (h *Handler) give(n int64) {
	h.mu.Lock()
	h.inFlight -= n
	h.mu.Unlock()
}

// Review answers one AdmissionReview: always allowed, with a JSON Patch
// when the pod is mutated. result is "mutated", "unchanged" or "skipped".
func (h *Handler) Review(ctx context.Context, body []byte) (out []byte, result string, err error) {
	var rv review
	if err := json.Unmarshal(body, &rv); err != nil {
		return nil, "", fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	if rv.Request == nil || rv.Request.UID == "" {
		return nil, "", errors.New("an AdmissionReview without a request uid")
	}
	resp := &response{UID: rv.Request.UID, Allowed: true}
	ops, warnings, result := h.mutate(ctx, rv.Request)
	if len(ops) > 0 {
		patch, err := json.Marshal(ops)
		if err != nil {
			return nil, "", err
		}
		resp.PatchType, resp.Patch = "JSONPatch", patch
	}
	resp.Warnings = warnings
	out, err = json.Marshal(review{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview", Response: resp})
	return out, result, err
}

// slot is one container the review may change, where the patch puts it.
type slot struct {
	path    string // /spec/containers/0
	c       container
	ref     name.Reference
	res     imagepatch.Resolution
	patched string // the patched image by digest; "" when the container runs its own
}

// mutate is a request's JSON Patch, the pod's warnings and the review's result.
func (h *Handler) mutate(ctx context.Context, req *request) ([]op, []string, string) {
	ephemeral := req.SubResource == "ephemeralcontainers" && req.Operation == "UPDATE"
	p, ok := h.decodePod(req, ephemeral)
	if !ok {
		return nil, nil, "skipped"
	}
	slots := h.selectSlots(req, p, ephemeral)
	if len(slots) == 0 {
		return nil, nil, "unchanged"
	}
	h.resolveAll(ctx, slots, req.DryRun)
	warnings := h.outcomes(req.Namespace+"/"+cmp.Or(p.Metadata.Name, p.Metadata.GenerateName+"*"), slots)
	ops := h.jsonPatch(p, slots, ephemeral)
	if len(ops) == 0 {
		return nil, warnings, "unchanged"
	}
	return ops, warnings, "mutated"
}

// decodePod is the pod under review, or false when the webhook leaves the
// request alone: not a pod's creation or an ephemeral containers update, a
// skipped namespace, a pod it cannot read or one that opts out.
func (h *Handler) decodePod(req *request, ephemeral bool) (*pod, bool) {
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || !(req.Operation == "CREATE" && req.SubResource == "" || ephemeral) {
		return nil, false
	}
	if slices.Contains(h.cfg.Skip, req.Namespace) {
		return nil, false
	}
	var p pod
	if err := json.Unmarshal(req.Object, &p); err != nil {
		h.log.Warn("cannot read the pod under review; admitted unchanged", "namespace", req.Namespace, "err", err)
		return nil, false
	}
	if p.Metadata.Annotations[AnnotationOptOut] == "false" {
		return nil, false
	}
	return &p, true
}

// selectSlots is the containers whose images the webhook selects.
func (h *Handler) selectSlots(req *request, p *pod, ephemeral bool) []*slot {
	var slots []*slot
	add := func(list string, cs []container, skip func(container) bool) {
		for i, c := range cs {
			if skip != nil && skip(c) {
				continue
			}
			ref, err := name.ParseReference(c.Image, h.cfg.NameOptions...)
			if err != nil || !h.selected(ref.Context().Name()) {
				continue
			}
			slots = append(slots, &slot{path: fmt.Sprintf("/spec/%s/%d", list, i), c: c, ref: ref})
		}
	}
	if ephemeral {
		// Only the ephemeral containers this update adds: the others are immutable.
		var old pod
		_ = json.Unmarshal(req.OldObject, &old)
		had := map[string]bool{}
		for _, c := range old.Spec.EphemeralContainers {
			had[c.Name] = true
		}
		add("ephemeralContainers", p.Spec.EphemeralContainers, func(c container) bool { return had[c.Name] })
	} else {
		add("initContainers", p.Spec.InitContainers, nil)
		add("containers", p.Spec.Containers, nil)
		add("ephemeralContainers", p.Spec.EphemeralContainers, nil)
	}
	return slots
}

// resolveAll resolves every slot's image at once.
func (h *Handler) resolveAll(ctx context.Context, slots []*slot, dryRun bool) {
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if dryRun { // a dry run writes nothing: the cache only
				if res, ok := h.r.Cached(s.ref); ok {
					s.res = res
				}
				return
			}
			s.res = h.r.Resolve(ctx, s.ref)
		}()
	}
	wg.Wait()
}

// outcomes weighs each slot's resolution in turn (outcome) and returns the
// pod's warnings.
func (h *Handler) outcomes(podName string, slots []*slot) []string {
	var warnings []string
	for _, s := range slots {
		if w := h.outcome(podName, s); w != "" {
			warnings = append(warnings, w)
		}
	}
	return warnings
}

// outcome counts and logs what becomes of one slot, sets s.patched when
// its container runs the patched image, and returns the pod's warning
// about it, if any.
func (h *Handler) outcome(podName string, s *slot) string {
	state := string(s.res.State)
	if state == "" {
		state = "dry-run"
	}
	h.m.images.WithLabelValues(state).Inc()
	attrs := []any{"pod", podName, "container", s.c.Name, "image", s.c.Image, "state", state}
	switch s.res.State {
	case imagepatch.StateCached, imagepatch.StatePatched:
	case imagepatch.StatePending:
		h.log.Info("image still being patched; the pod runs it unpatched", attrs...)
		return fmt.Sprintf("oomguard: %s is being patched; container %s runs it unpatched this time", s.c.Image, s.c.Name)
	case imagepatch.StateThrottled:
		h.m.throttle.WithLabelValues(s.res.Limit).Inc()
		h.log.Warn("image not patched now: a limit on the webhook's work is reached; the pod runs it unpatched", append(attrs, "limit", s.res.Limit)...)
		return fmt.Sprintf("oomguard: %s is not patched now (the webhook's %s limit is reached); container %s runs it unpatched this time", s.c.Image, s.res.Limit, s.c.Name)
	case imagepatch.StateFailed:
		h.log.Warn("image not patched; the pod runs it as it is", append(attrs, "err", s.res.Error)...)
		return fmt.Sprintf("oomguard: %s could not be patched (%s); container %s runs it unpatched", escape.Terminal(s.c.Image), cmp.Or(short(s.res.Error), "no reason given"), escape.Terminal(s.c.Name))
	case imagepatch.StateSkipped:
		// The image is a patched one already, or one for a platform
		// the patch has no files for (windows): then said so.
		if len(s.res.Unpatched) > 0 {
			h.log.Info("image for a platform the patch has no files for; the pod runs it as it is", append(attrs, "why", s.res.Error)...)
			return fmt.Sprintf("oomguard: %s is not patched: it is for %s, which the patch has no files for; container %s runs it as it is", escape.Terminal(s.c.Image), short(strings.Join(s.res.Unpatched, ", ")), escape.Terminal(s.c.Name))
		}
		return ""
	default:
		return ""
	}
	if s.res.NoCommand && len(s.c.Command) == 0 && len(s.c.Args) == 0 {
		// The image has neither entrypoint nor cmd and the pod gives no
		// command: it cannot start, and the patched one must not start
		// something in its place (the shim's default, /sbin/init).
		h.log.Info("image without a command, and the pod gives none; left as it is", attrs...)
		return fmt.Sprintf("oomguard: %s has no entrypoint or cmd and container %s gives no command: left as it is", escape.Terminal(s.c.Image), escape.Terminal(s.c.Name))
	}
	var warning string
	if len(s.res.Unpatched) > 0 {
		warning = fmt.Sprintf("oomguard: %s's entries for %s are not patched (the patch has no files for them); container %s runs unpatched on such nodes", escape.Terminal(s.c.Image), short(strings.Join(s.res.Unpatched, ", ")), escape.Terminal(s.c.Name))
	}
	patched, err := name.NewDigest(s.res.Patched, h.cfg.NameOptions...)
	if err != nil || patched.Context().Name() != s.ref.Context().Name() {
		// Only to an image made from this one, in its repository: the pod's pull secrets reach it.
		h.log.Warn("the patched image is not in the pod's image's repository; left alone", append(attrs, "patched", s.res.Patched)...)
		return warning
	}
	s.patched = patched.String()
	h.log.Info("runs the patched image", append(attrs, "patched", s.patched, "tag", s.res.Destination, "note", s.res.Note)...)
	return warning
}

// jsonPatch is the patch for the slots that run patched: their images, the
// prefix in front of a command they set, and the pod's original images; nil
// when none does.
func (h *Handler) jsonPatch(p *pod, slots []*slot, ephemeral bool) []op {
	var ops []op
	originals := map[string]string{}
	for _, s := range slots {
		if s.patched == "" {
			continue
		}
		ops = append(ops, op{"replace", s.path + "/image", s.patched})
		if len(s.c.Command) > 0 && len(h.cfg.Prefix) > 0 && !hasPrefix(s.c.Command, h.cfg.Prefix) && (len(h.cfg.InitPrefix) == 0 || !hasPrefix(s.c.Command, h.cfg.InitPrefix)) {
			ops = append(ops, op{"replace", s.path + "/command", append(slices.Clone(h.cfg.Prefix), s.c.Command...)})
		}
		originals[s.c.Name] = s.c.Image
	}
	if len(ops) == 0 {
		return nil
	}
	if !ephemeral { // an ephemeral containers update may change nothing else
		b, _ := json.Marshal(originals)
		if p.Metadata.Annotations == nil {
			ops = append(ops, op{"add", "/metadata/annotations", map[string]string{AnnotationOriginal: string(b)}})
		} else {
			ops = append(ops, op{"add", "/metadata/annotations/" + escapePointer(AnnotationOriginal), string(b)})
		}
	}
	return ops
}

func (h *Handler) selected(repo string) bool {
	for _, g := range h.cfg.Images {
		if ok, _ := path.Match(g, repo); ok {
			return true
		}
	}
	return false
}

// escapePointer escapes a JSON Pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func hasPrefix(s, pre []string) bool { return len(s) >= len(pre) && slices.Equal(s[:len(pre)], pre) }

// short is a registry's error for a warning: one line, printable, at most
// 160 characters (the API server drops a warning it cannot print).
func short(s string) string {
	s = escape.Terminal(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > 160 {
		s = string(r[:159]) + "…"
	}
	return s
}
