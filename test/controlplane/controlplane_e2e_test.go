//go:build e2e

package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestE2EControlPlane starts the control plane and asks it what a kubelet's
// and an operator's first commands would.
func TestE2EControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c := ForTest(ctx, t, Options{Hosts: []string{"10.0.2.2"}})
	t.Logf("ready in %s", time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := c.Kubectl(ctx, nil, "get", "serviceaccount", "default", "-o", "name")
		if err == nil && strings.TrimSpace(string(out)) == "serviceaccount/default" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default service account: %v\n%s", err, c.Logs(20))
		}
		time.Sleep(time.Second)
	}
	t.Logf("default service account after %s", time.Since(start).Round(time.Millisecond))
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
}
