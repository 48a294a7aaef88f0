//go:build e2e

package scoreinputs

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/score"
	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/testbin"
)

const key = score.AnnotationInputs

// The chart's score-inputs policies on a real API server: each new pod
// gets its priority and its containers' memory requests in the annotation,
// which the plugin's parser reads back; a pod that writes its own value
// gets the spec's instead, and no later update adds or changes it.
func TestE2EScoreInputsAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cp := controlplane.ForTest(ctx, t, controlplane.Options{})
	kubectl := cp.KubectlFor(ctx, t)
	rendered := testbin.Chart(t, "kube-system", "--set", "scores.admissionInputs=true", "--set-string", "config=[scores]\nadmission_inputs = true\n",
		"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "--show-only", "templates/score-inputs.yaml")
	kubectl("", "create", "namespace", "gpu")
	// A pod from before the policies: no annotation.
	kubectl(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"before","namespace":"gpu"},"spec":{"containers":[{"name":"main","image":"registry.example/app:1"}]}}`, "create", "-f", "-")
	kubectl(rendered, "apply", "-f", "-")
	kubectl(`{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"platform"},"value":1000000}`, "create", "-f", "-")

	admit := func(pod string) (map[string]string, error) { return cp.Admitted(ctx, pod) }
	plain := podJSON("p", "", nil, container("main", "500Mi", "1Gi"))
	cp.AwaitMutation(ctx, t, plain, key)
	for _, tc := range []struct {
		name string
		pod  string
		want string // the annotation as admitted
	}{
		{"one container", plain, "priority=0;requests=main:524288000"},
		{"a priority class, two containers and an init container", podJSON("q", "platform", nil, container("main", "64Gi", ""), container("side", "", "")),
			"priority=1000000;requests=main:68719476736,side:0,setup:1000"},
		{"decimal units and no requests", podJSON("r", "", nil, container("main", "2G", "4G"), container("cpu-only", "", "")),
			"priority=0;requests=main:2000000000,cpu-only:0"},
		{"a forged value replaced", podJSON("s", "", map[string]string{key: "priority=2000001000;requests=main:1099511627776"}, container("main", "50Mi", "")),
			"priority=0;requests=main:52428800"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "init container") {
				tc.pod = withInit(tc.pod, container("setup", "1k", ""))
			}
			a, err := admit(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if a[key] != tc.want {
				t.Fatalf("admitted %s=%q, want %q", key, a[key], tc.want)
			}
			p, r, err := score.ParseInputs(a[key], "main")
			if err != nil || !p.Known() || !r.Known() {
				t.Fatalf("the plugin cannot read %q: %v %v %v", a[key], p, r, err)
			}
		})
	}

	// Later updates cannot add or change it.
	kubectl(podJSON("held", "", nil, container("main", "500Mi", "")), "create", "-f", "-")
	for _, tc := range []struct {
		name    string
		args    []string
		refused bool
	}{
		{name: "changed", args: []string{"annotate", "-n", "gpu", "pod/held", "--overwrite", key + "=priority=0;requests=main:68719476736"}, refused: true},
		{name: "added to a pod the policy did not annotate", args: []string{"annotate", "-n", "gpu", "pod/before", key + "=priority=0;requests=main:1"}, refused: true},
		{name: "a label", args: []string{"label", "-n", "gpu", "pod/held", "team=ml"}},
		{name: "another annotation", args: []string{"annotate", "-n", "gpu", "pod/held", "example.com/owner=ml"}},
		{name: "removed", args: []string{"annotate", "-n", "gpu", "pod/held", key + "-"}},
	} {
		t.Run("update: "+tc.name, func(t *testing.T) {
			out, err := cp.Kubectl(ctx, nil, append(tc.args, "--dry-run=server")...)
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), "is written by oomguard") {
					t.Fatalf("admitted (%v): %s", err, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	refusesForged(ctx, t, cp)
}

// refusesForged: with the mutation away (its binding deleted, as where the
// API server skipped it), the validating policy alone refuses a pod that
// brings its own value, and admits one with its spec's, or none.
func refusesForged(ctx context.Context, t *testing.T, cp *controlplane.Cluster) {
	if _, err := cp.Kubectl(ctx, nil, "delete", "mutatingadmissionpolicybinding", "oomguard-score-inputs"); err != nil {
		t.Fatal(err)
	}
	create := func(ann map[string]string) error {
		_, err := cp.Kubectl(ctx, []byte(podJSON("f", "", ann, container("main", "50Mi", ""))), "create", "--dry-run=server", "-f", "-")
		return err
	}
	forged := map[string]string{key: "priority=0;requests=main:68719476736"}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		err := create(forged)
		if err != nil && strings.Contains(err.Error(), "is written by oomguard from the pod spec: want priority=0;requests=main:52428800") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a forged value without the mutation: %v, want refused naming the spec's value", err)
		}
	}
	if err := create(map[string]string{key: "priority=0;requests=main:52428800"}); err != nil {
		t.Errorf("the spec's own value refused: %v", err)
	}
	if err := create(nil); err != nil {
		t.Errorf("a pod without the annotation refused: %v", err)
	}
}

func container(name, request, limit string) map[string]any {
	c := map[string]any{"name": name, "image": "registry.example/app:1"}
	res := map[string]any{}
	if request != "" {
		res["requests"] = map[string]any{"memory": request}
	}
	if limit != "" {
		res["limits"] = map[string]any{"memory": limit}
	}
	if len(res) > 0 {
		c["resources"] = res
	}
	return c
}

// podJSON is a pod in namespace gpu as kubectl reads it.
func podJSON(name, priorityClass string, annotations map[string]string, containers ...map[string]any) string {
	spec := map[string]any{"containers": containers}
	if priorityClass != "" {
		spec["priorityClassName"] = priorityClass
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "gpu", "annotations": annotations}, "spec": spec})
	return string(b)
}

func withInit(pod string, c map[string]any) string {
	var m map[string]any
	json.Unmarshal([]byte(pod), &m)
	m["spec"].(map[string]any)["initContainers"] = []any{c}
	b, _ := json.Marshal(m)
	return string(b)
}
