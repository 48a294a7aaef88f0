//go:build e2e

package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The webhook's pods placed by their own values, apart from the node
// agent's: priority class, node selector, tolerations, affinity; spread
// over zones without refusing a cluster of one; a non-root group; restarted
// when they stop answering (/livez), held out of the Service until they
// have a certificate to serve (/healthz).
func TestE2EChartWebhookPods(t *testing.T) {
	webhook := []string{"template", "oomguard", chart, "--namespace", "oomguard", "--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={r.example/base/*}"}
	render := func(args ...string) (web, agent corev1.PodSpec) {
		pods := podTemplates(t, tool(t, "helm", append(append([]string{}, webhook...), args...)...))
		return pods["Deployment"].Spec, pods["DaemonSet"].Spec
	}

	spec, agent := render()
	c := spec.Containers[0]
	if spec.PriorityClassName != "" || len(spec.Tolerations) != 0 || !reflect.DeepEqual(spec.NodeSelector, map[string]string{"kubernetes.io/os": "linux"}) ||
		spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || spec.Affinity.NodeAffinity != nil ||
		spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("by default: priority %q, tolerations %v, nodeSelector %v, affinity %+v; want none, none, Linux, replicas apart", spec.PriorityClassName, spec.Tolerations, spec.NodeSelector, spec.Affinity)
	}
	if agent.PriorityClassName != "system-node-critical" || len(agent.Tolerations) != 1 {
		t.Errorf("the node agent's placement changed: %q %v", agent.PriorityClassName, agent.Tolerations)
	}
	if tsc := spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" || tsc[0].WhenUnsatisfiable != corev1.ScheduleAnyway ||
		tsc[0].MaxSkew != 1 || tsc[0].LabelSelector == nil || tsc[0].LabelSelector.MatchLabels["app.kubernetes.io/component"] != "imagepatch-webhook" ||
		tsc[0].LabelSelector.MatchLabels["app.kubernetes.io/instance"] != "oomguard" {
		t.Errorf("topologySpreadConstraints %+v, want the replicas spread over zones, ScheduleAnyway", tsc)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsGroup == nil || *sc.RunAsGroup == 0 || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("the webhook's pod securityContext %+v, want a user and a group, not root's", sc)
	}
	if r, l := c.ReadinessProbe, c.LivenessProbe; r == nil || l == nil || r.HTTPGet == nil || l.HTTPGet == nil ||
		r.HTTPGet.Path != "/healthz" || l.HTTPGet.Path != "/livez" {
		t.Errorf("probes: readiness %+v, liveness %+v; want /healthz and /livez", r, l)
	}

	values := filepath.Join(t.TempDir(), "values.yaml")
	os.WriteFile(values, []byte(`priorityClassName: agent-critical
tolerations: []
nodeSelector: {pool: gpu}
imagepatchWebhook:
  priorityClassName: webhook-high
  nodeSelector: {pool: system}
  tolerations: [{key: dedicated, operator: Equal, value: system, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: zone-class, operator: In, values: [a]}]}]
`), 0o644)
	spec, agent = render("-f", values)
	if spec.PriorityClassName != "webhook-high" || !reflect.DeepEqual(spec.NodeSelector, map[string]string{"pool": "system", "kubernetes.io/os": "linux"}) ||
		!reflect.DeepEqual(spec.Tolerations, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "system", Effect: corev1.TaintEffectNoSchedule}}) ||
		spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.PodAntiAffinity != nil {
		t.Errorf("the webhook's own placement: priority %q, nodeSelector %v, tolerations %v, affinity %+v", spec.PriorityClassName, spec.NodeSelector, spec.Tolerations, spec.Affinity)
	}
	if agent.PriorityClassName != "agent-critical" || len(agent.Tolerations) != 0 || agent.NodeSelector["pool"] != "gpu" {
		t.Errorf("the node agent took the webhook's placement: %q %v %v", agent.PriorityClassName, agent.Tolerations, agent.NodeSelector)
	}
}

// The webhook's deadline must end before the API server gives up on the
// review (timeoutSeconds): past it, every image it is still patching would
// run unpatched with no warning. The schema cannot compare two values; the
// chart refuses it at render, whatever the duration's units.
func TestE2EChartWebhookDeadline(t *testing.T) {
	for _, tc := range []struct {
		deadline, timeout string
		ok                bool
	}{
		{"5s", "10", true},
		{"9500ms", "10", true},
		{"9.9s", "10", true},
		{"25s", "30", true},
		{"10s", "10", false},
		{"10000ms", "10", false},
		{"15s", "10", false},
		{"1m", "30", false},
		{"1m", "10", false},
		{"0.5m", "30", false},
		{"2m30s", "30", false},
	} {
		_, errb, err := run(t, "helm", "template", "oomguard", chart, "--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={r.example/base/*}",
			"--set", "imagepatchWebhook.deadline="+tc.deadline, "--set", "imagepatchWebhook.timeoutSeconds="+tc.timeout)
		refused := err != nil && strings.Contains(errb, "imagepatchWebhook.deadline "+tc.deadline+": must be below imagepatchWebhook.timeoutSeconds ("+tc.timeout+"s)")
		if tc.ok && err != nil || !tc.ok && !refused {
			t.Errorf("deadline %s, timeoutSeconds %s: %v %s, want accepted %v", tc.deadline, tc.timeout, err, errb, tc.ok)
		}
	}
	for _, set := range []string{"imagepatchWebhook.nodeSelectors.pool=a", "imagepatchWebhook.tolerations[0].efect=NoSchedule",
		"imagepatchWebhook.tolerations[0].operator=Exist", "imagepatchWebhook.affinity.podAntiAfinity.x=y", "imagepatchWebhook.priorityClassName=High",
		"imagepatchWebhook.priorityClass=high", "validateConfigHostnetwork=true"} {
		if _, errb, err := run(t, "helm", "template", "oomguard", chart, "--set", set); err == nil || !strings.Contains(errb, "values don't meet the specifications of the schema") {
			t.Errorf("--set %s: %v %s, want the schema to refuse it", set, err, errb)
		}
	}
}
