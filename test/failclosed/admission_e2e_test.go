//go:build e2e

package failclosed

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	validator "github.com/containerd/nri/plugins/default-validator"

	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/testbin"
)

const key = "required-plugins.noderesource.dev"

// The chart's policies on a real API server: a pod created in a namespace
// that fails closed gets the annotation that makes the runtime's validator
// refuse its containers while oomguard is away, and no annotation a pod
// sets itself gets it past that validator without oomguard; pods
// elsewhere, and oomguard's own, are left alone.
func TestE2EFailClosedAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cp := controlplane.ForTest(ctx, t, controlplane.Options{})
	kubectl := cp.KubectlFor(ctx, t)
	// As helm install finds it on Kubernetes 1.36 and later.
	kubectl(testbin.Chart(t, "kube-system", "--set", "failClosed.enabled=true", "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
		"--show-only", "templates/fail-closed.yaml"), "apply", "-f", "-")
	// A pod created before its namespace fails closed: no annotation.
	kubectl("", "create", "namespace", "later")
	kubectl(podJSON("later", "before", nil), "create", "-f", "-")
	kubectl("", "create", "namespace", "guarded")
	kubectl("", "label", "namespace", "guarded", "oomguard.io/fail-closed=true")
	kubectl("", "create", "namespace", "free")

	admit := func(ns string, annotations map[string]string) (map[string]string, error) {
		return cp.Admitted(ctx, podJSON(ns, "p", annotations))
	}
	// The policies are in force once the API server has read them.
	cp.AwaitMutation(ctx, t, podJSON("guarded", "p", nil), key)

	for _, tc := range []struct {
		name        string
		ns          string
		annotations map[string]string
		refused     bool
	}{
		{name: "a plain pod", ns: "guarded"},
		{name: "another plugin too", ns: "guarded", annotations: map[string]string{key: `["gpu-plugin", "oomguard"]`}},
		{name: "plain and quoted items", ns: "guarded", annotations: map[string]string{key: "[ gpu, 'oomguard' ]"}},
		{name: "another plugin instead", ns: "guarded", annotations: map[string]string{key: `["gpu-plugin"]`}, refused: true},
		{name: "none", ns: "guarded", annotations: map[string]string{key: `[]`}, refused: true},
		{name: "a container's own list", ns: "guarded", annotations: map[string]string{key + "/container.main": `[]`}, refused: true},
		{name: "the pod's own list", ns: "guarded", annotations: map[string]string{key + "/pod": `["x"]`}, refused: true},
		{name: "a name that contains it", ns: "guarded", annotations: map[string]string{key: `["oomguard2"]`}, refused: true},
		{name: "a name inside another", ns: "guarded", annotations: map[string]string{key: `["not-oomguard", "x"]`}, refused: true},
		{name: "a comment", ns: "guarded", annotations: map[string]string{key: "[x] # oomguard"}, refused: true},
		{name: "block style", ns: "guarded", annotations: map[string]string{key: "- oomguard"}, refused: true},
		{name: "a flow mapping", ns: "guarded", annotations: map[string]string{key: "{oomguard: x}"}, refused: true},
		{name: "a second document", ns: "guarded", annotations: map[string]string{key: "[oomguard]\n---\n[]"}, refused: true},
		{name: "an alias", ns: "guarded", annotations: map[string]string{key: "[&a x, *a, oomguard]"}, refused: true},
		{name: "a tag", ns: "guarded", annotations: map[string]string{key: "[!!str oomguard]"}, refused: true},
		{name: "a container's list that keeps it", ns: "guarded", annotations: map[string]string{key + "/container.main": `["oomguard", "gpu"]`}},
		{name: "a namespace that does not fail closed", ns: "free", annotations: map[string]string{key + "/container.main": `[]`}},
		{name: "oomguard's own namespace", ns: "kube-system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := admit(tc.ns, tc.annotations)
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), "fails closed") {
					t.Fatalf("admitted %v (%v), want refused", a, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			required := tc.ns == "guarded"
			if required && a[key] == "" {
				t.Fatalf("admitted without %s: %v", key, a)
			}
			if !required && tc.annotations == nil && len(a) > 0 {
				t.Fatalf("a pod outside the namespaces that fail closed changed: %v", a)
			}
			// What the runtime's validator makes of the pod as admitted.
			if got := validate(a, false); required != (got != nil) {
				t.Fatalf("without oomguard connected the validator says %v for %v", got, a)
			}
			if err := validate(a, true); required && err != nil {
				t.Fatalf("with oomguard connected the validator refuses %v: %v", a, err)
			}
		})
	}

	// Once created, a pod keeps its required plugins: kubelet builds a
	// new sandbox (a reboot, a sandbox that died) from the pod's current
	// annotations, exactly while oomguard may be away. Its other updates
	// go through, and so do those of a pod from before the namespace
	// failed closed, since `later` is labelled now.
	kubectl(podJSON("guarded", "held", nil), "create", "-f", "-")
	kubectl("", "label", "namespace", "later", "oomguard.io/fail-closed=true")
	patch := func(annotations string) []string {
		return []string{"patch", "-n", "guarded", "pod/held", "--type=merge", "-p", `{"metadata":{"annotations":` + annotations + `}}`}
	}
	for _, tc := range []struct {
		name    string
		args    []string
		refused bool
	}{
		{name: "overwritten with none", args: []string{"annotate", "-n", "guarded", "pod/held", "--overwrite", key + "=[]"}, refused: true},
		{name: "removed", args: []string{"annotate", "-n", "guarded", "pod/held", key + "-"}, refused: true},
		{name: "a container's list added", args: []string{"annotate", "-n", "guarded", "pod/held", key + "/container.main=[]"}, refused: true},
		{name: "a container's list that keeps it added", args: []string{"annotate", "-n", "guarded", "pod/held", key + `/container.main=["oomguard"]`}, refused: true},
		{name: "merge-patched to another plugin", args: patch(`{"` + key + `":"[\"gpu\"]"}`), refused: true},
		{name: "merge-patched to null", args: patch(`{"` + key + `":null}`), refused: true},
		{name: "a label", args: []string{"label", "-n", "guarded", "pod/held", "team=ml"}},
		{name: "another annotation", args: patch(`{"example.com/owner":"ml"}`)},
		{name: "a label on a pod from before the namespace failed closed", args: []string{"label", "-n", "later", "pod/before", "team=ml"}},
	} {
		t.Run("update: "+tc.name, func(t *testing.T) {
			out, err := cp.Kubectl(ctx, nil, append(tc.args, "--dry-run=server")...)
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), "cannot change once it is created") {
					t.Fatalf("admitted (%v): %s", err, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// podJSON is a pod of one container, main, as kubectl reads it.
func podJSON(ns, name string, annotations map[string]string) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "annotations": annotations},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": "registry.example/app:1"}}}})
	return string(b)
}

// validate runs NRI's default validator (what containerd 2.2+ and CRI-O
// 1.34+ run, turned on by install --fail-closed) on container "main" of a
// pod with annotations, oomguard connected or not (the other plugins the
// cases name always are).
func validate(annotations map[string]string, connected bool) error {
	v := validator.NewDefaultValidator(&validator.DefaultValidatorConfig{Enable: true})
	req := &api.ValidateContainerAdjustmentRequest{
		Pod:       &api.PodSandbox{Name: "p", Namespace: "guarded", Annotations: annotations},
		Container: &api.Container{Name: "main"},
	}
	for _, other := range []string{"gpu", "gpu-plugin", "x"} {
		req.AddPlugin(other, "20")
	}
	if connected {
		req.AddPlugin("oomguard", "10")
	}
	if err := v.ValidateContainerAdjustment(context.Background(), req); err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	return nil
}
