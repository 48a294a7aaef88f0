//go:build e2e

package chartci

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/testbin"
)

// The CRDs the chart's optional kinds are validated against, from their
// projects' modules on the Go module proxy.
var crds = []struct{ module, dir string }{
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_%s.yaml"},
	{"github.com/cert-manager/cert-manager@v1.21.2", "deploy/crds/cert-manager.io_%s.yaml"},
}

var crdKinds = [][]string{{"podmonitors", "prometheusrules"}, {"issuers", "certificates"}}

// The release's namespace.
const namespace = "oomguard-ci"

// Every ci values file, rendered for the oldest Kubernetes the chart
// supports and for the control plane's own (with what it serves besides:
// the Prometheus Operator's and cert-manager's CRDs), is taken by the API
// server object by object in a strict server-side dry run: no unknown or
// duplicate field, no warning, every CEL expression of the admission
// policies compiled. The 1.28 rendering is validated by this newer server:
// what 1.28 would refuse that it takes is not seen here.
func TestE2EChartCIValuesServerSide(t *testing.T) {
	repo, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := testbin.Component("helm", "helm")
	if err != nil {
		t.Skipf("%v: the chart is rendered with the built helm", err)
	}
	if os.Getenv("OOMGUARD_KUBE_BIN") == "" {
		if _, err := testbin.Component("kubernetes", "kube-apiserver"); err != nil {
			t.Skipf("%v: the objects are validated by the built control plane", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var manifests []string
	for i, c := range crds {
		dir := moduleDir(t, c.module)
		for _, kind := range crdKinds[i] {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf(c.dir, kind)))
			if err != nil {
				t.Fatal(err)
			}
			manifests = append(manifests, string(b))
		}
	}
	cp := controlplane.ForTest(ctx, t, controlplane.Options{})
	kubectl := cp.KubectlFor(ctx, t)
	// create, not apply: cert-manager's Issuer CRD is larger than the annotation apply keeps.
	kubectl(strings.Join(manifests, "\n---\n"), "create", "-f", "-")
	kubectl("", "wait", "--for=condition=Established", "--timeout=60s", "crd/podmonitors.monitoring.coreos.com",
		"crd/prometheusrules.monitoring.coreos.com", "crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, _ := cp.Kubectl(ctx, nil, "api-resources", "-o", "name")
		if strings.Contains(string(out), "podmonitors.monitoring.coreos.com") && strings.Contains(string(out), "issuers.cert-manager.io") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRDs are not served:\n%s", out)
		}
	}
	kubectl("", "create", "namespace", namespace)

	var version struct{ ServerVersion struct{ GitVersion string } }
	if err := json.Unmarshal([]byte(kubectl("", "version", "-o", "json")), &version); err != nil || version.ServerVersion.GitVersion == "" {
		t.Fatalf("the server's version: %v", err)
	}
	apis := []string{"monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/PrometheusRule", "cert-manager.io/v1/Issuer", "cert-manager.io/v1/Certificate"}
	served := apis
	if strings.Contains(kubectl("", "get", "--raw", "/apis/admissionregistration.k8s.io/v1"), `"kind":"MutatingAdmissionPolicy"`) {
		served = append(served[:len(served):len(served)], "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
	}

	t.Logf("Kubernetes %s serves %v", version.ServerVersion.GitVersion, served)

	// The dry run is strict: it refuses an unknown field, in a CRD's kind too.
	for _, bad := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: " + namespace + "}\ndatta: {a: b}\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: x, namespace: " + namespace + "}\nspec: {selector: {}, podMetricsEndpoints: [{port: m, intervall: 30s}]}\n",
	} {
		if out, err := dryRun(ctx, cp, bad); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Fatalf("a dry run took an unknown field: %v\n%s", err, out)
		}
	}

	files, err := filepath.Glob(filepath.Join(repo, "deploy", "helm", "oomguard", "ci", "*-values.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("the chart's ci values: %v %v", files, err)
	}
	for _, f := range files {
		for _, kube := range []struct {
			version string
			apis    []string
		}{{"1.28.0", apis}, {strings.TrimPrefix(version.ServerVersion.GitVersion, "v"), served}} {
			t.Run(filepath.Base(f)+"@"+kube.version, func(t *testing.T) {
				args := []string{"template", "ci", filepath.Join(repo, "deploy", "helm", "oomguard"), "--namespace", namespace, "-f", f, "--kube-version", kube.version}
				for _, a := range kube.apis {
					args = append(args, "--api-versions", a)
				}
				rendered, err := exec.CommandContext(ctx, helm, args...).Output()
				if err != nil {
					t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
				}
				want := strings.Count(string(rendered), "# Source: ")
				out, err := dryRun(ctx, cp, string(rendered))
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				if got := strings.Count(out, "(server dry run)"); got != want || want < 4 {
					t.Fatalf("%d of %d objects taken:\n%s", got, want, out)
				}
			})
		}
	}
}

// dryRun creates the objects of manifest in a strict server-side dry run.
func dryRun(ctx context.Context, cp *controlplane.Cluster, manifest string) (string, error) {
	out, err := cp.Kubectl(ctx, []byte(manifest), "create", "--dry-run=server", "--validate=strict", "--warnings-as-errors", "-f", "-")
	return string(out), err
}

// moduleDir is a module's files, downloaded from the Go module proxy.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	dl := exec.Command("go", "mod", "download", "-json", module)
	dl.Dir = t.TempDir()
	dl.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := dl.Output()
	var mod struct{ Dir, Error string }
	if err != nil || json.Unmarshal(out, &mod) != nil || mod.Dir == "" {
		t.Fatalf("%s from the Go module proxy: %v %s", module, err, mod.Error)
	}
	return mod.Dir
}
