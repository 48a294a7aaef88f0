//go:build e2e

package helm

import (
	"strings"
	"testing"
)

// scores.admissionInputs and the configuration's scores.admission_inputs
// go together: the chart refuses a configuration that trusts the
// annotation with nothing holding it to the pod's spec, policies whose
// annotation the plugin would not read, and policies the cluster cannot
// serve; together they render the four objects.
func TestE2EChartScoreInputs(t *testing.T) {
	const (
		trusting = "config=[scores]\nadmission_inputs = true\n"
		mapAPI   = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
	)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"the configuration trusts it alone", []string{"--set-string", trusting, "--api-versions", mapAPI}, "scores.admissionInputs is false"},
		{"the policies alone", []string{"--set", "scores.admissionInputs=true", "--api-versions", mapAPI}, "add admission_inputs = true"},
		{"no MutatingAdmissionPolicy", []string{"--set", "scores.admissionInputs=true", "--set-string", trusting}, "Kubernetes 1.36 and later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", "oomguard", chart, "--namespace", "kube-system"}, tc.args...)
			if _, stderr, err := run(t, "helm", args...); err == nil || !strings.Contains(stderr, tc.want) {
				t.Fatalf("rendered (%v), want refused saying %q: %s", err, tc.want, stderr)
			}
		})
	}
	out := tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "--set", "scores.admissionInputs=true",
		"--set-string", trusting, "--api-versions", mapAPI, "--show-only", "templates/score-inputs.yaml")
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if !strings.Contains(out, "\nkind: "+kind+"\n") {
			t.Errorf("no %s:\n%s", kind, out)
		}
	}
	if !strings.Contains(tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "--set", "scores.admissionInputs=true",
		"--set-string", trusting, "--api-versions", mapAPI), "admission_inputs = true") {
		t.Error("the plugin's configuration does not trust the annotation")
	}
}
