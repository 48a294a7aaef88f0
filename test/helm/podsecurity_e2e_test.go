//go:build e2e

package helm

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	psa "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// podTemplates are the pod templates of every workload helm rendered, by
// kind ("Job" for the validation hook); each kind is there once.
func podTemplates(t *testing.T, rendered string) map[string]*corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]*corev1.PodTemplateSpec{}
	for _, j := range documents(t, rendered) {
		var head header
		json.Unmarshal(j, &head)
		var obj any
		var tmpl *corev1.PodTemplateSpec
		switch head.Kind {
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			obj, tmpl = ds, &ds.Spec.Template
		case "Deployment":
			d := &appsv1.Deployment{}
			obj, tmpl = d, &d.Spec.Template
		case "Job":
			job := &batchv1.Job{}
			obj, tmpl = job, &job.Spec.Template
		default:
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			t.Fatalf("%s does not decode strictly: %v\n%s", head.Kind, err, j)
		}
		if out[head.Kind] != nil {
			t.Fatalf("two %ss", head.Kind)
		}
		out[head.Kind] = tmpl
	}
	return out
}

// Every workload at the strictest Pod Security level its job allows, as
// the API server's own admission judges it (k8s.io/pod-security-admission),
// whatever is enabled: the webhook and the validation Job restricted; the
// node agent privileged, failing baseline only for what writing other
// containers' OOM settings takes (host namespaces, privileged containers,
// hostPath volumes); its doctor, which only reads, a container restricted
// but for running as root, and without a capability.
func TestE2EChartPodSecurity(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		t.Fatal(err)
	}
	forbidden := func(level psa.Level, tmpl *corev1.PodTemplateSpec) []string {
		res := policy.AggregateCheckResults(eval.EvaluatePod(psa.LevelVersion{Level: level, Version: psa.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec))
		return res.ForbiddenReasons
	}
	webhook := []string{"imagepatchWebhook.enabled=true", "imagepatchWebhook.images={r.example/base/*}"}
	monitoring := []string{"podMonitor.enabled=true", "prometheusRule.enabled=true", "grafanaDashboard.enabled=true"}
	everything := slices.Concat(webhook, monitoring, []string{"events.enabled=true", "nodeCondition.enabled=true", "restartRuntime=true", "failClosed.enabled=true",
		"imagepatchWebhook.tls.certManager=true", "imagepatchWebhook.networkPolicy.enabled=true", "imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.10/32}",
		"imagepatchWebhook.clientCA.configMap=apiserver-client-ca", "imagepatchWebhook.signingKeySecret=cosign-key",
		"imagepatchWebhook.registryCredentialsSecret=registry", "imagepatchWebhook.registryCAConfigMap=registry-ca"})
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"defaults", nil},
		{"webhook", webhook},
		{"failClosed", []string{"failClosed.enabled=true"}},
		{"hook mode", []string{"mode=hook"}},
		{"events and the node's condition", []string{"events.enabled=true", "nodeCondition.enabled=true"}},
		{"monitoring", monitoring},
		{"everything", everything},
	} {
		args := []string{"template", "oomguard", chart, "--namespace", "kube-system", "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
			"--api-versions", "monitoring.coreos.com/v1/PodMonitor", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
			"--api-versions", "cert-manager.io/v1/Issuer", "--api-versions", "cert-manager.io/v1/Certificate"}
		pods := podTemplates(t, tool(t, "helm", append(args, setArgs(tc.set)...)...))
		want := []string{"DaemonSet", "Job"}
		if slices.Contains(tc.set, "imagepatchWebhook.enabled=true") {
			want = append(want, "Deployment")
		}
		for _, kind := range want {
			if pods[kind] == nil {
				t.Fatalf("%s: no %s rendered", tc.name, kind)
			}
		}
		if len(pods) != len(want) {
			t.Fatalf("%s: workloads %v, want %v", tc.name, slices.Collect(maps.Keys(pods)), want)
		}
		for _, kind := range []string{"Deployment", "Job"} {
			if p := pods[kind]; p != nil {
				if f := forbidden(psa.LevelRestricted, p); len(f) > 0 {
					t.Errorf("%s: the %s is not restricted: %s", tc.name, kind, strings.Join(f, ", "))
				}
			}
		}
		ds := pods["DaemonSet"]
		if f := forbidden(psa.LevelBaseline, ds); !reflect.DeepEqual(f, []string{"host namespaces", "hostPath volumes", "privileged"}) {
			t.Errorf("%s: the node agent fails baseline for %q, want only host namespaces, hostPath volumes, privileged", tc.name, f)
		}
		var doctor *corev1.Container
		for i, c := range ds.Spec.Containers {
			if c.Name == "oomguard-doctor" {
				doctor = &ds.Spec.Containers[i]
			}
		}
		if doctor == nil {
			t.Fatalf("%s: no doctor container", tc.name)
		}
		// The doctor reads world-readable /proc and cgroupfs files and root's own socket and directory: no capability.
		sc := doctor.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s: the doctor's securityContext %+v, want a read-only root, no privilege escalation, every capability dropped and none added", tc.name, sc)
		}
		alone := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{*doctor}}}
		if f := forbidden(psa.LevelRestricted, alone); !reflect.DeepEqual(f, []string{"runAsNonRoot != true"}) {
			t.Errorf("%s: the doctor's container, out of its pod, fails restricted for %q, want only runAsNonRoot (root: the CRI socket and the textfile directory are root's)", tc.name, f)
		}
	}

	// On the node's network (a control plane that cannot reach pod IPs, a
	// cluster without a pod network yet) a pod is privileged for that alone.
	pods := podTemplates(t, tool(t, "helm", append([]string{"template", "oomguard", chart, "--namespace", "kube-system",
		"--set", "imagepatchWebhook.hostNetwork=true", "--set", "validateConfigHostNetwork=true"}, setArgs(webhook)...)...))
	for _, kind := range []string{"Deployment", "Job"} {
		if f := forbidden(psa.LevelBaseline, pods[kind]); !reflect.DeepEqual(f, []string{"host namespaces"}) || !pods[kind].Spec.HostNetwork {
			t.Errorf("the %s on the node's network fails baseline for %q, want host namespaces alone", kind, f)
		}
	}
}

func setArgs(set []string) (out []string) {
	for _, s := range set {
		out = append(out, "--set", s)
	}
	return out
}
