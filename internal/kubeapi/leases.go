package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Slots bound how many holders do one thing at once across the cluster:
// Max Leases (coordination.k8s.io) NAME-0 … NAME-(Max-1) in Namespace, each
// held by one Holder (a node's name) until it releases it, or stops
// renewing it for Duration (its node gone).
type Slots struct {
	API       *Client
	Namespace string
	Name      string
	Max       int
	Holder    string
	Duration  time.Duration
	held      string // the Lease held, "" for none
}

type lease struct {
	APIVersion string    `json:"apiVersion,omitempty"`
	Kind       string    `json:"kind,omitempty"`
	Metadata   leaseMeta `json:"metadata"`
	Spec       leaseSpec `json:"spec"`
}

type leaseMeta struct {
	Name            string `json:"name,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

type leaseSpec struct {
	HolderIdentity       *string    `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds *int32     `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          *microTime `json:"acquireTime,omitempty"`
	RenewTime            *microTime `json:"renewTime,omitempty"`
}

// microTime is metav1.MicroTime's form.
type microTime struct{ time.Time }

func (t microTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") + `"`), nil
}

func (t *microTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	v, err := time.Parse(`"`+time.RFC3339Nano+`"`, string(b))
	t.Time = v
	return err
}

func (s *Slots) path(name string) string {
	p := "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(s.Namespace) + "/leases"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// free: nobody holds l, or its holder stopped renewing it.
func (l *lease) free(now time.Time) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return true
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// taken is the spec of a Lease this holder takes now.
func (s *Slots) taken(now time.Time) leaseSpec {
	holder, secs := s.Holder, int32(s.Duration/time.Second)
	return leaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &microTime{now}, RenewTime: &microTime{now}}
}

// patch changes a Lease's spec if it is still at resourceVersion (a 409
// otherwise: someone changed it since it was read).
func (s *Slots) patch(ctx context.Context, name, resourceVersion string, spec leaseSpec) error {
	p := lease{Metadata: leaseMeta{ResourceVersion: resourceVersion}, Spec: spec}
	return s.API.Do(ctx, http.MethodPatch, s.path(name), "application/merge-patch+json", p, nil)
}

// Acquire takes a free slot, or the one this holder holds already (after
// its own restart); false when every slot is held by others.
func (s *Slots) Acquire(ctx context.Context) (bool, error) {
	for i := range s.Max {
		name := fmt.Sprintf("%s-%d", s.Name, i)
		var l lease
		err := s.API.Do(ctx, http.MethodGet, s.path(name), "", nil, &l)
		now := time.Now()
		switch {
		case Code(err) == http.StatusNotFound:
			l = lease{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Metadata: leaseMeta{Name: name, Namespace: s.Namespace}, Spec: s.taken(now)}
			err = s.API.Do(ctx, http.MethodPost, s.path(""), "application/json", l, nil)
		case err != nil:
			return false, fmt.Errorf("read the restart slot %s/%s: %w", s.Namespace, name, err)
		case l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == s.Holder:
			s.held = name
			return true, s.Renew(ctx)
		case l.free(now):
			err = s.patch(ctx, name, l.Metadata.ResourceVersion, s.taken(now))
		default:
			continue
		}
		switch {
		case err == nil:
			s.held = name
			return true, nil
		case Code(err) == http.StatusConflict: // a create of one that exists too: another holder was quicker
			continue
		default:
			return false, fmt.Errorf("take the restart slot %s/%s: %w", s.Namespace, name, err)
		}
	}
	return false, nil
}

// Renew keeps the slot held.
func (s *Slots) Renew(ctx context.Context) error {
	if s.held == "" {
		return nil
	}
	var l lease
	if err := s.API.Do(ctx, http.MethodGet, s.path(s.held), "", nil, &l); err != nil {
		return fmt.Errorf("renew the restart slot %s/%s: %w", s.Namespace, s.held, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != s.Holder {
		s.held = ""
		return fmt.Errorf("the restart slot %s/%s was taken from %s", s.Namespace, l.Metadata.Name, s.Holder)
	}
	if err := s.patch(ctx, s.held, l.Metadata.ResourceVersion, leaseSpec{RenewTime: &microTime{time.Now()}}); err != nil {
		return fmt.Errorf("renew the restart slot %s/%s: %w", s.Namespace, s.held, err)
	}
	return nil
}

// Release frees the slot held: the Lease goes, if it is still this holder's.
func (s *Slots) Release(ctx context.Context) error {
	if s.held == "" {
		return nil
	}
	var l lease
	if err := s.API.Do(ctx, http.MethodGet, s.path(s.held), "", nil, &l); err != nil {
		if Code(err) == http.StatusNotFound {
			s.held = ""
			return nil
		}
		return fmt.Errorf("free the restart slot %s/%s: %w", s.Namespace, s.held, err)
	}
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == s.Holder {
		del := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": map[string]string{"resourceVersion": l.Metadata.ResourceVersion}}
		if err := s.API.Do(ctx, http.MethodDelete, s.path(s.held), "application/json", del, nil); err != nil && Code(err) != http.StatusNotFound {
			return fmt.Errorf("free the restart slot %s/%s: %w", s.Namespace, s.held, err)
		}
	}
	s.held = ""
	return nil
}
