//go:build e2e

package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EControlPlane starts the control plane and asks it what a kubelet's
// and an operator's first commands would.
func TestE2EControlPlane(t *testing.T) {
	bin := os.Getenv("OOMGUARD_KUBE_BIN")
	if bin == "" {
		repo, _ := filepath.Abs("../..")
		bin = filepath.Join(repo, "build", "components", "kubernetes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, Options{Bin: bin, Dir: t.TempDir(), Hosts: []string{"10.0.2.2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
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
