//go:build e2e

package kubeapi

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/testbin"
)

// Through a real API server, with the chart's RBAC and node-scoped policy
// for the node agent (restartRuntime on) and tokens as its pods get them,
// bound to a pod on their node: the node's condition is set beside the
// others and its transition moves only with its status; the restart slots
// are taken, held, refused to a second node, freed, taken over when their
// holder stopped renewing; nothing the role does not name is reachable,
// and no node's agent writes for another node.
func TestE2ENodeConditionAndSlots(t *testing.T) {
	repo, _ := filepath.Abs("../..")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	helm := testbin.ComponentFor(t, "helm", "helm")
	cp := controlplane.ForTest(ctx, t, controlplane.Options{})
	kubectl := cp.KubectlFor(ctx, t)
	rbac, err := exec.Command(helm, "template", "gpu", filepath.Join(repo, "deploy", "helm", "oomguard"),
		"--namespace", "oomguard", "--set", "restartRuntime=true", "--set", "restartRuntimeMaxAtOnce=1", "--set", "events.enabled=true",
		"--show-only", "templates/serviceaccount.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	if !strings.Contains(string(rbac), "kind: ValidatingAdmissionPolicy\n") {
		t.Fatalf("the chart holds no node-scoped policy:\n%s", rbac)
	}
	kubectl("apiVersion: v1\nkind: Namespace\nmetadata: {name: oomguard}\n---\n"+string(rbac), "apply", "-f", "-")
	agents := map[string]*Client{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		token, ca, err := cp.NodeAgentFiles(ctx, "oomguard", "gpu-oomguard-nri", n, filepath.Join(t.TempDir(), n))
		if err != nil {
			t.Fatal(err)
		}
		if agents[n], err = FromFiles("https://127.0.0.1:"+strconv.Itoa(cp.Port), token, ca); err != nil {
			t.Fatal(err)
		}
	}
	api := agents["node-a"]
	kubectl("", "patch", "node", "node-a", "--subresource", "status", "--type", "merge", "-p",
		`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status"}]}}`)

	cond := &NodeCondition{API: api, Node: "node-a", Type: "OOMGuardRuntimeRestartPending"}
	get := func() string {
		return kubectl("", "get", "node", "node-a", "-o", `jsonpath={range .status.conditions[*]}{.type}={.status}/{.reason}@{.lastTransitionTime};{end}`)
	}
	if err := cond.Set(ctx, "True", "RuntimeRestartPending", "containerd.service has not restarted"); err != nil {
		t.Fatal(err)
	}
	first := get()
	if !strings.Contains(first, "Ready=True/KubeletReady") || !strings.Contains(first, "OOMGuardRuntimeRestartPending=True/RuntimeRestartPending@") {
		t.Fatalf("the node's conditions: %s", first)
	}
	// What the chart's NOTES and docs/install-cluster.md tell the operator to run.
	columns := kubectl("", "get", "nodes", "-o", `custom-columns=NODE:.metadata.name,RESTART PENDING:.status.conditions[?(@.type=="OOMGuardRuntimeRestartPending")].status`)
	if lines := strings.Split(columns, "\n"); len(lines) != 4 || strings.Join(strings.Fields(lines[1]), " ") != "node-a True" || strings.Join(strings.Fields(lines[2]), " ") != "node-b <none>" {
		t.Fatalf("kubectl's columns:\n%s", columns)
	}
	time.Sleep(1100 * time.Millisecond) // a transition time has seconds
	cond.Set(ctx, "True", "RuntimeRestartPending", "still")
	if again := get(); again != first {
		t.Fatalf("the same status moved the transition: %s, then %s", first, again)
	}
	cond.Set(ctx, "False", "NRIConnected", "serving")
	if last := get(); !strings.Contains(last, "OOMGuardRuntimeRestartPending=False/NRIConnected@") || last == first {
		t.Fatalf("a new status keeps its transition: %s, then %s", first, last)
	}

	slots := func(holder string, d time.Duration) *Slots {
		return &Slots{API: agents[holder], Namespace: "oomguard", Name: "gpu-oomguard-restart", Max: 1, Holder: holder, Duration: d}
	}
	a, b := slots("node-a", time.Minute), slots("node-b", time.Minute)
	if ok, err := a.Acquire(ctx); !ok || err != nil {
		t.Fatalf("node-a takes the free slot: %v %v", ok, err)
	}
	if ok, err := b.Acquire(ctx); ok || err != nil {
		t.Fatalf("node-b takes the slot node-a holds: %v %v", ok, err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := slots("node-a", time.Minute).Acquire(ctx); !ok || err != nil {
		t.Fatalf("node-a's plugin, started again, finds its slot: %v %v", ok, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if out, _ := cp.Kubectl(ctx, nil, "-n", "oomguard", "get", "leases", "-o", "name"); strings.TrimSpace(string(out)) != "" {
		t.Fatalf("released, the Lease stays: %s", out)
	}
	short := slots("node-b", time.Second)
	if ok, err := short.Acquire(ctx); !ok || err != nil {
		t.Fatalf("node-b takes the freed slot: %v %v", ok, err)
	}
	time.Sleep(2500 * time.Millisecond) // node-b stops renewing: its node is gone
	c := slots("node-c", time.Minute)
	if ok, err := c.Acquire(ctx); !ok || err != nil {
		t.Fatalf("node-c takes the slot its holder stopped renewing: %v %v", ok, err)
	}
	if err := short.Renew(ctx); err == nil || !strings.Contains(err.Error(), "taken from node-b") {
		t.Fatalf("node-b renews a slot taken from it: %v", err)
	}
	if holder := kubectl("", "-n", "oomguard", "get", "lease", "gpu-oomguard-restart-0", "-o", "jsonpath={.spec.holderIdentity}"); holder != "node-c" {
		t.Fatalf("the slot's holder: %s", holder)
	}

	unnamed := &Slots{API: api, Namespace: "oomguard", Name: "other", Max: 1, Holder: "node-a", Duration: time.Minute}
	if _, err := unnamed.Acquire(ctx); Code(err) != 403 {
		t.Fatalf("a Lease the role does not name: %v, want 403", err)
	}
	if err := api.Do(ctx, "GET", "/api/v1/nodes/node-a", "", nil, nil); Code(err) != 403 {
		t.Fatalf("reading a node: %v, want 403", err)
	}

	// Node-scoped: its own node's status, Events it reports about pods or
	// its own node, slots it holds itself; nothing for another node.
	refused := func(what string, err error) {
		t.Helper()
		if Code(err) != 403 || !strings.Contains(err.Error(), "oomguard on node node-a may") {
			t.Fatalf("%s: %v, want 403 from the node-scoped policy", what, err)
		}
	}
	refused("node-a's agent sets node-b's condition", (&NodeCondition{API: api, Node: "node-b", Type: "OOMGuardRuntimeRestartPending"}).Set(ctx, "True", "r", "m"))
	if got := kubectl("", "get", "node", "node-b", "-o", "jsonpath={.status.conditions}"); got != "" {
		t.Fatalf("node-b's conditions after a refused write: %s", got)
	}
	event := func(reporter, kind, name string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Event", "metadata": map[string]any{"generateName": "x.", "namespace": "default"},
			"involvedObject": map[string]any{"kind": kind, "name": name, "namespace": "default"}, "type": "Warning", "reason": "OOMKilling",
			"message": "m", "source": map[string]any{"component": "oomguard-nri", "host": reporter}, "reportingComponent": "oomguard-nri", "reportingInstance": reporter}
	}
	post := func(ev map[string]any) error {
		return api.Do(ctx, "POST", "/api/v1/namespaces/default/events", "application/json", ev, nil)
	}
	if err := post(event("node-a", "Pod", "trainer")); err != nil {
		t.Fatalf("node-a's agent writes an Event about a pod: %v", err)
	}
	if err := post(event("node-a", "Node", "node-a")); err != nil {
		t.Fatalf("node-a's agent writes an Event about its node: %v", err)
	}
	refused("an Event reported as node-b", post(event("node-b", "Pod", "trainer")))
	refused("an Event about node-b", post(event("node-a", "Node", "node-b")))
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := slots("node-a", time.Minute)
	other.Holder = "node-b"
	_, err = other.Acquire(ctx)
	refused("node-a's agent takes a free slot for node-b", err)
	// A token of the account bound to no pod (made by hand) names no node.
	token, ca, err := cp.ServiceAccountFiles(ctx, "oomguard", "gpu-oomguard-nri", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := FromFiles("https://127.0.0.1:"+strconv.Itoa(cp.Port), token, ca)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&NodeCondition{API: unbound, Node: "node-a", Type: "OOMGuardRuntimeRestartPending"}).Set(ctx, "True", "r", "m"); Code(err) != 403 || !strings.Contains(err.Error(), "names no node") {
		t.Fatalf("a token bound to no pod sets node-a's condition: %v, want 403", err)
	}
}
