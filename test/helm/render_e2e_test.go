//go:build e2e

package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

var (
	repo      = "../.."
	chart     = filepath.Join(repo, "deploy/helm/oomguard")
	component = filepath.Join(repo, "build/components/helm")
)

func tool(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, errb, err := run(t, name, args...)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", name, args, err, out, errb)
	}
	return out
}

// run runs a component with helm's homes in the test's directories.
func run(t *testing.T, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin := filepath.Join(component, name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run make components", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// podMonitor is the part of the Prometheus Operator's PodMonitor the chart
// writes; decoding refuses anything else.
type podMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector            struct{ MatchLabels map[string]string } `json:"selector"`
		PodMetricsEndpoints []struct {
			Port        string `json:"port"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
				Regex        string   `json:"regex"`
				Replacement  string   `json:"replacement"`
				Action       string   `json:"action"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// prometheusRule is the part of the Prometheus Operator's PrometheusRule
// the chart writes; decoding refuses anything else.
type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// certManagerObject is the part of cert-manager's Issuer and Certificate
// the chart writes; decoding refuses anything else.
type certManagerObject struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		SelfSigned *struct{}                    `json:"selfSigned"`
		CA         *struct{ SecretName string } `json:"ca"`
		IsCA       bool                         `json:"isCA"`
		CommonName string                       `json:"commonName"`
		SecretName string                       `json:"secretName"`
		DNSNames   []string                     `json:"dnsNames"`
		IssuerRef  struct{ Name string }        `json:"issuerRef"`
	} `json:"spec"`
}

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// documents is each non-empty document helm rendered, as JSON.
func documents(t *testing.T, rendered string) (out [][]byte) {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		out = append(out, j)
	}
	return out
}

// header is what every object has: its kind and metadata.
type header struct {
	Kind     string
	Metadata struct {
		Name                string
		Labels, Annotations map[string]string
	}
}

// objects decodes every document strictly into its k8s.io/api type: an
// unknown or misspelt field fails, as the API server would refuse it.
func objects(t *testing.T, rendered string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, j := range documents(t, rendered) {
		var head header
		json.Unmarshal(j, &head)
		var obj any
		switch head.Kind {
		case "DaemonSet":
			obj = &appsv1.DaemonSet{}
		case "ConfigMap":
			obj = &corev1.ConfigMap{}
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "Service":
			obj = &corev1.Service{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "MutatingWebhookConfiguration":
			obj = &admissionregistrationv1.MutatingWebhookConfiguration{}
		case "Job":
			obj = &batchv1.Job{}
		case "ValidatingAdmissionPolicy":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		// v1 (Kubernetes 1.36) has v1beta1's fields; this module's k8s.io/api is 1.34's.
		case "MutatingAdmissionPolicy":
			obj = &admissionregistrationv1beta1.MutatingAdmissionPolicy{}
		case "MutatingAdmissionPolicyBinding":
			obj = &admissionregistrationv1beta1.MutatingAdmissionPolicyBinding{}
		case "PodMonitor":
			obj = &podMonitor{}
		case "NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		case "PrometheusRule":
			obj = &prometheusRule{}
		case "Issuer", "Certificate":
			obj = &certManagerObject{}
		default:
			t.Fatalf("unexpected kind %q:\n%s", head.Kind, j)
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			t.Fatalf("%s does not decode strictly: %v\n%s", head.Kind, err, j)
		}
		key := head.Kind
		if head.Metadata.Annotations["helm.sh/hook"] != "" {
			key = "hook " + head.Kind
		}
		if strings.HasSuffix(head.Metadata.Name, "-nri-own-node") {
			key = "own-node " + head.Kind
		}
		if head.Kind == "PodMonitor" && strings.HasSuffix(head.Metadata.Name, "-imagepatch-webhook") {
			key = "webhook PodMonitor"
		}
		out[key] = obj
	}
	return out
}

func TestE2EHelmLint(t *testing.T) {
	tool(t, "helm", "lint", "--strict", chart)
}

// With its defaults the chart renders what `kubectl apply -k deploy/` applies,
// but for the Job that validates the configuration first. Its pods carry no
// checksum of the configuration (the plugin reads a changed one again)
// except in hook mode, whose configuration the init container copies.
func TestE2EChartMatchesKustomization(t *testing.T) {
	h := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system"))
	k := objects(t, tool(t, "kustomize", "build", filepath.Join(repo, "deploy")))
	if h["hook Job"] == nil || h["hook ConfigMap"] == nil {
		t.Fatal("the chart validates no configuration before it rolls out")
	}
	hook := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "--set", "mode=hook"))
	if hook["DaemonSet"].(*appsv1.DaemonSet).Spec.Template.Annotations["checksum/config"] == "" {
		t.Fatal("in hook mode the chart's pods carry no checksum of the configuration")
	}
	// Helm's own labels say who manages the objects: kustomize's are not Helm's.
	helmOnly := func(labels map[string]string) {
		if labels["app.kubernetes.io/managed-by"] != "Helm" || !strings.HasPrefix(labels["helm.sh/chart"], "oomguard-") {
			t.Errorf("the chart's labels %v lack managed-by and chart", labels)
		}
		delete(labels, "app.kubernetes.io/managed-by")
		delete(labels, "helm.sh/chart")
	}
	helmOnly(h["DaemonSet"].(*appsv1.DaemonSet).Labels)
	helmOnly(h["DaemonSet"].(*appsv1.DaemonSet).Spec.Template.Labels)
	helmOnly(h["ConfigMap"].(*corev1.ConfigMap).Labels)
	helmOnly(h["ServiceAccount"].(*corev1.ServiceAccount).Labels)
	helmOnly(h["ClusterRole"].(*rbacv1.ClusterRole).Labels)
	helmOnly(h["ClusterRoleBinding"].(*rbacv1.ClusterRoleBinding).Labels)
	for _, kind := range []string{"own-node ValidatingAdmissionPolicy", "own-node ValidatingAdmissionPolicyBinding"} {
		if h[kind] == nil {
			t.Fatalf("the chart renders no %s", kind)
		}
		helmOnly(h[kind].(interface{ GetLabels() map[string]string }).GetLabels())
		// kustomize 5.7 does not know the kind is cluster-scoped and gives it
		// its namespace, which the API server drops (BeforeCreate).
		if k[kind] != nil {
			k[kind].(interface{ SetNamespace(string) }).SetNamespace("")
		}
	}
	for _, kind := range []string{"DaemonSet", "ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "own-node ValidatingAdmissionPolicy", "own-node ValidatingAdmissionPolicyBinding"} {
		if !reflect.DeepEqual(h[kind], k[kind]) {
			hj, _ := json.MarshalIndent(h[kind], "", " ")
			kj, _ := json.MarshalIndent(k[kind], "", " ")
			t.Errorf("%s differs:\nhelm:\n%s\nkustomize:\n%s", kind, hj, kj)
		}
	}
	shipped, err := os.ReadFile(filepath.Join(repo, "deploy/config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := h["ConfigMap"].(*corev1.ConfigMap).Data["config.toml"]; got != string(shipped) {
		t.Errorf("the chart's configuration is not deploy/config.toml:\n%s", got)
	}
}

func TestE2EChartValues(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	values := filepath.Join(t.TempDir(), "values.yaml")
	os.WriteFile(values, []byte(fmt.Sprintf(`image:
  repository: registry.example/oomguard
  digest: %s
config: |
  strict = true
doctor:
  enabled: false
podMonitor:
  enabled: true
priorityClassName: node-critical-ish
tolerations: []
resources:
  limits: {memory: 48Mi}
`, digest)), 0o644)
	o := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "monitoring", "-f", values, "--api-versions", "monitoring.coreos.com/v1/PodMonitor"))
	ds := o["DaemonSet"].(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Image != "registry.example/oomguard@"+digest {
		t.Fatalf("containers: %+v", spec.Containers)
	}
	if spec.PriorityClassName != "node-critical-ish" || len(spec.Tolerations) != 0 || ds.Namespace != "monitoring" {
		t.Fatalf("pod spec: %+v", spec)
	}
	if m := spec.Containers[0].Resources.Limits.Memory().String(); m != "48Mi" {
		t.Fatalf("memory limit %s", m)
	}
	for _, v := range spec.Volumes {
		if v.Name == "textfile" {
			t.Fatal("the doctor is off, its textfile volume must go too")
		}
	}
	if got := o["ConfigMap"].(*corev1.ConfigMap).Data["config.toml"]; got != "strict = true\n" {
		t.Fatalf("config %q", got)
	}
	pm, ok := o["PodMonitor"].(*podMonitor)
	// The plugin declares no port (a host port stops a surge): the
	// target is the node's address at the chart's port.
	if !ok || len(pm.Spec.PodMetricsEndpoints) != 1 || len(pm.Spec.PodMetricsEndpoints[0].Relabelings) == 0 ||
		pm.Spec.PodMetricsEndpoints[0].Relabelings[0].TargetLabel != "__address__" || pm.Spec.PodMetricsEndpoints[0].Relabelings[0].Replacement != "${1}:9741" {
		t.Fatalf("PodMonitor: %+v", o["PodMonitor"])
	}
	for _, c := range spec.Containers {
		if c.Name == "oomguard-nri" && (len(c.Ports) > 0 || c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil) {
			t.Fatalf("the plugin's container must declare no port and probe its own socket: %+v", c)
		}
	}
	if u := ds.Spec.UpdateStrategy.RollingUpdate; u == nil || u.MaxUnavailable == nil || u.MaxUnavailable.String() != "0" || u.MaxSurge == nil || u.MaxSurge.String() != "10%" {
		t.Fatalf("the rollout must surge: %+v", ds.Spec.UpdateStrategy)
	}
}

// nriInstall is the nri mode's init container: the drop-in, unless the
// runtime serves NRI already, and what is left to do for the plugin.
const nriInstall = "/usr/local/bin/oomguard-nri install --nri-only --root=/host --socket=/var/run/nri/nri.sock --state=/run/oomguard/nri-state.json --proc-root=/"

// The install modes: what the init containers run, and which containers
// stay; an impossible combination fails at render, not on the nodes.
func TestE2EChartModes(t *testing.T) {
	render := func(args ...string) *appsv1.DaemonSet {
		o := objects(t, tool(t, "helm", append([]string{"template", "oomguard", chart, "--namespace", "kube-system"}, args...)...))
		return o["DaemonSet"].(*appsv1.DaemonSet)
	}
	inits := func(ds *appsv1.DaemonSet) (out []string) {
		for _, c := range ds.Spec.Template.Spec.InitContainers {
			out = append(out, strings.Join(append(c.Command, c.Args...), " "))
		}
		return out
	}
	names := func(ds *appsv1.DaemonSet) (out []string) {
		for _, c := range ds.Spec.Template.Spec.Containers {
			out = append(out, c.Name)
		}
		return out
	}
	for _, tc := range []struct {
		args       []string
		inits      []string
		containers []string
	}{
		{nil, []string{nriInstall, "/usr/local/bin/oomguard-doctor remediate --root=/host --config=/etc/oomguard/config.toml"}, []string{"oomguard-nri", "oomguard-doctor"}},
		// The plugin restarts the runtime, paced (TestE2EChartRestartPaced): not the init container.
		{[]string{"--set", "restartRuntime=true", "--set", "doctor.enabled=false"},
			[]string{nriInstall, "/usr/local/bin/oomguard-doctor remediate --root=/host --config=/etc/oomguard/config.toml"}, []string{"oomguard-nri"}},
		{[]string{"--set", "mode=hook"}, []string{"/usr/local/bin/oomguard-hook install --copy --root=/host --hook-path=/opt/oomguard/bin/oomguard-hook --config=/etc/oomguard/config.toml", "/usr/local/bin/oomguard-doctor remediate --root=/host --config=/etc/oomguard/config.toml"}, []string{"oomguard-doctor"}},
		{[]string{"--set", "mode=uninstall", "--set", "restartRuntime=true"},
			[]string{"/usr/local/bin/oomguard-doctor remediate --root=/host --undo", "/usr/local/bin/oomguard-nri uninstall --root=/host --restart-runtime", "/usr/local/bin/oomguard-hook uninstall --root=/host"}, []string{"oomguard-doctor"}},
	} {
		ds := render(tc.args...)
		if got := inits(ds); !reflect.DeepEqual(got, tc.inits) {
			t.Errorf("%v: init containers %q, want %q", tc.args, got, tc.inits)
		}
		if got := names(ds); !reflect.DeepEqual(got, tc.containers) {
			t.Errorf("%v: containers %q, want %q", tc.args, got, tc.containers)
		}
		if !ds.Spec.Template.Spec.HostPID {
			t.Errorf("%v: the pod must see the node's processes (cgroup.procs shows others' as 0)", tc.args)
		}
		if !ds.Spec.Template.Spec.HostNetwork {
			t.Errorf("%v: the pod must use the node's network, to run before the pod network", tc.args)
		}
	}
	for _, bad := range [][]string{{"--set", "mode=hook", "--set", "doctor.enabled=false"}, {"--set", "mode=sidecar"}} {
		cmd := exec.Command(filepath.Join(component, "helm"), append([]string{"template", "oomguard", chart}, bad...)...)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "mode") {
			t.Errorf("%v renders: %s", bad, out)
		}
	}
}

// events.enabled (and the node's condition, on by default): the plugin's
// container alone gets the service account's token, the account may only
// create and patch events and patch nodes' status, and the plugin is told
// its node and the API server.
func TestE2EChartEvents(t *testing.T) {
	o := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system",
		"--set", "events.enabled=true", "--set", "apiServer=https://10.0.0.1:6443"))
	role, ok := o["ClusterRole"].(*rbacv1.ClusterRole)
	if !ok || len(role.Rules) != 2 || !reflect.DeepEqual(role.Rules[0].Resources, []string{"events"}) ||
		!reflect.DeepEqual(role.Rules[0].Verbs, []string{"create", "patch"}) || !reflect.DeepEqual(role.Rules[0].APIGroups, []string{""}) ||
		!reflect.DeepEqual(role.Rules[1], rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}}) {
		t.Fatalf("the role: %+v", o["ClusterRole"])
	}
	b, ok := o["ClusterRoleBinding"].(*rbacv1.ClusterRoleBinding)
	if !ok || b.RoleRef.Name != role.Name || len(b.Subjects) != 1 || b.Subjects[0].Name != "oomguard-nri" || b.Subjects[0].Namespace != "kube-system" {
		t.Fatalf("the binding: %+v", o["ClusterRoleBinding"])
	}
	spec := o["DaemonSet"].(*appsv1.DaemonSet).Spec.Template.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Fatal("the pod automounts the token into every container")
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		has := false
		for _, m := range c.VolumeMounts {
			has = has || m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
		}
		args := strings.Join(c.Args, " ")
		if c.Name == "oomguard-nri" {
			if !has || !strings.Contains(args, "--events --event-qps=1 --event-burst=25 --node-condition --api-server=https://10.0.0.1:6443") || c.Env[len(c.Env)-1].Name != "NODE_NAME" {
				t.Errorf("the plugin: token mounted %v, args %s", has, args)
			}
		} else if has {
			t.Errorf("%s gets the token", c.Name)
		}
	}
	// Each node's agent held to its own node (the API server's test is
	// internal/kubeapi's e2e), on clusters whose tokens name the node.
	vap, ok := o["own-node ValidatingAdmissionPolicy"].(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if !ok || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail || len(vap.Spec.MatchConditions) != 1 ||
		vap.Spec.MatchConditions[0].Expression != "request.userInfo.username == 'system:serviceaccount:kube-system:oomguard-nri'" || len(vap.Spec.Validations) != 4 {
		t.Fatalf("the node-scoped policy: %+v", o["own-node ValidatingAdmissionPolicy"])
	}
	if vb, ok := o["own-node ValidatingAdmissionPolicyBinding"].(*admissionregistrationv1.ValidatingAdmissionPolicyBinding); !ok || vb.Spec.PolicyName != vap.Name ||
		!reflect.DeepEqual(vb.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) || vb.Spec.MatchResources != nil {
		t.Fatalf("the node-scoped policy's binding: %+v", o["own-node ValidatingAdmissionPolicyBinding"])
	}
	old := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "--set", "events.enabled=true", "--kube-version", "1.29.0"))
	if old["own-node ValidatingAdmissionPolicy"] != nil || old["ClusterRole"] == nil {
		t.Error("Kubernetes 1.29 (no node in the pod's token): the node-scoped policy rendered, or the role not")
	}
	plain := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "--set", "nodeCondition.enabled=false"))
	if _, ok := plain["ClusterRole"]; ok {
		t.Error("a role without events or the node's condition")
	}
	for _, c := range plain["DaemonSet"].(*appsv1.DaemonSet).Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == "api-token" {
				t.Errorf("%s gets the token with nothing to write", c.Name)
			}
		}
	}
}

// restartRuntime: the plugin, not the init container, restarts the runtime
// through the node's systemd (mounted in it alone), holding one of
// restartRuntimeMaxAtOnce Leases, which its account may take and nothing
// else.
func TestE2EChartRestartPaced(t *testing.T) {
	o := objects(t, tool(t, "helm", "template", "gpu", chart, "--namespace", "oomguard", "--set", "restartRuntime=true", "--set", "restartRuntimeMaxAtOnce=3"))
	role, _ := o["Role"].(*rbacv1.Role)
	want := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"gpu-oomguard-restart-0", "gpu-oomguard-restart-1", "gpu-oomguard-restart-2"},
			Verbs: []string{"get", "patch", "delete"}}}
	if role == nil || !reflect.DeepEqual(role.Rules, want) || role.Namespace != "oomguard" {
		t.Fatalf("the restart slots' role: %+v", role)
	}
	spec := o["DaemonSet"].(*appsv1.DaemonSet).Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		args := strings.Join(c.Args, " ")
		systemd := false
		for _, m := range c.VolumeMounts {
			systemd = systemd || m.MountPath == "/host/run/systemd"
		}
		if c.Name == "oomguard-nri" {
			if !systemd || !strings.Contains(args, "--restart-runtime --restart-slots=oomguard/gpu-oomguard-restart --restart-max-at-once=3") {
				t.Errorf("the plugin: systemd mounted %v, args %s", systemd, args)
			}
		} else if systemd || strings.Contains(args, "restart") {
			t.Errorf("%s restarts or reaches systemd: %s", c.Name, args)
		}
	}
}

// values.schema.json refuses what a typo or a wrong value would otherwise
// let through silently: `helm install` fails, saying which value.
func TestE2EChartSchema(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"restartRunTime=true", "additional properties 'restartRunTime'"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"mode=nrii", "/mode"},
		{"nri.metricsPort=70000", "/nri/metricsPort"},
		{"doctor.interval=5min", "/doctor/interval"},
		{"image.digest=latest", "/image/digest"},
		{"imagepatchWebhook.tls.certmanager=true", "additional properties 'certmanager'"},
		{"resources.limit.memory=1Gi", "additional properties 'limit'"},
		{"restartRuntimeMaxAtOnce=0", "/restartRuntimeMaxAtOnce"},
		{"apiServer=10.0.0.1:6443", "/apiServer"},
		{"events.apiServer=https://10.0.0.1", "additional properties 'apiServer'"},
	} {
		_, out, err := run(t, "helm", "template", "oomguard", chart, "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: %v, want the schema to refuse it (%q):\n%s", tc.set, err, tc.want, out)
		}
	}
}

// What a platform team expects of a chart: names prefixed by the release
// (two releases in one namespace do not collide), the recommended labels on
// every object and selectors of name, instance and component only, the
// image's tag from the chart's appVersion, Linux nodes that are not
// virtual, and the pod-level values passed through.
func TestE2EChartOperable(t *testing.T) {
	appVersion := ""
	for _, l := range strings.Split(tool(t, "helm", "show", "chart", chart), "\n") {
		if v, ok := strings.CutPrefix(l, "appVersion: "); ok {
			appVersion = v
		}
	}
	webhook := []string{"--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={r.example/base/*}", "--set", "podMonitor.enabled=true",
		"--api-versions", "monitoring.coreos.com/v1/PodMonitor"}
	names := map[string]string{}
	for _, release := range []string{"oomguard", "gpu"} {
		out := tool(t, "helm", append([]string{"template", release, chart, "--namespace", "kube-system"}, webhook...)...)
		for _, j := range documents(t, out) {
			var o struct {
				Kind     string
				Metadata struct {
					Name   string
					Labels map[string]string
				}
				Spec struct {
					Selector json.RawMessage
				}
			}
			json.Unmarshal(j, &o)
			if o.Kind == "" {
				continue
			}
			if prev, ok := names[o.Kind+"/"+o.Metadata.Name]; ok && prev != release {
				t.Errorf("%s/%s is in releases %s and %s", o.Kind, o.Metadata.Name, prev, release)
			}
			names[o.Kind+"/"+o.Metadata.Name] = release
			if release == "gpu" && !strings.HasPrefix(o.Metadata.Name, "gpu-oomguard-") {
				t.Errorf("%s %s: not prefixed by the release", o.Kind, o.Metadata.Name)
			}
			l := o.Metadata.Labels
			if l["app.kubernetes.io/name"] != "oomguard" || l["app.kubernetes.io/instance"] != release || l["app.kubernetes.io/version"] != appVersion ||
				l["app.kubernetes.io/managed-by"] != "Helm" || !strings.HasPrefix(l["helm.sh/chart"], "oomguard-") {
				t.Errorf("%s %s: labels %v", o.Kind, o.Metadata.Name, l)
			}
			if sel := string(o.Spec.Selector); sel != "" && !strings.Contains(sel, `"app.kubernetes.io/instance":"`+release+`"`) || strings.Contains(sel, "version") {
				t.Errorf("%s %s: selector %s", o.Kind, o.Metadata.Name, sel)
			}
		}
	}

	o := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system"))
	spec := o["DaemonSet"].(*appsv1.DaemonSet).Spec.Template.Spec
	if spec.NodeSelector["kubernetes.io/os"] != "linux" || spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		t.Fatalf("by default on Linux nodes that are not virtual: nodeSelector %v, affinity %+v", spec.NodeSelector, spec.Affinity)
	}
	if img := spec.Containers[0].Image; img != "ghcr.io/oomguard/oomguard:"+appVersion {
		t.Fatalf("the image %s, want the chart's appVersion %s as its tag", img, appVersion)
	}

	values := filepath.Join(t.TempDir(), "values.yaml")
	os.WriteFile(values, []byte(`imagePullSecrets: [{name: regcred}]
podLabels: {team: platform}
podAnnotations: {example.com/scrape: "false"}
affinity: null
nodeSelector: {pool: gpu}
updateStrategy: {type: OnDelete}
initResources: {limits: {memory: 40Mi}}
podMonitor: {enabled: true, labels: {release: kube-prometheus-stack}}
`), 0o644)
	o = objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "kube-system", "-f", values, "--api-versions", "monitoring.coreos.com/v1/PodMonitor"))
	ds := o["DaemonSet"].(*appsv1.DaemonSet)
	spec = ds.Spec.Template.Spec
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" || ds.Spec.Template.Labels["team"] != "platform" ||
		ds.Spec.Template.Annotations["example.com/scrape"] != "false" || spec.Affinity != nil || !reflect.DeepEqual(spec.NodeSelector, map[string]string{"pool": "gpu", "kubernetes.io/os": "linux"}) ||
		ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate != nil || ds.Spec.Selector.MatchLabels["team"] != "" {
		t.Fatalf("pod values not passed through: %+v", ds)
	}
	if m := spec.InitContainers[0].Resources.Limits.Memory().String(); m != "40Mi" {
		t.Fatalf("the init container's memory limit %s", m)
	}
	if m := spec.Containers[0].Resources.Limits.Memory().String(); m != "64Mi" {
		t.Fatalf("the plugin's memory limit %s (initResources must not change it)", m)
	}
	if pm := o["PodMonitor"].(*podMonitor); pm.Metadata.Labels["release"] != "kube-prometheus-stack" || pm.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "node-agent" {
		t.Fatalf("PodMonitor: %+v", pm)
	}
}

// The webhook alone (nodeAgent.enabled=false): no DaemonSet, nor anything
// only it uses; on the node's network it listens on the node's address at
// its port, resolves cluster names, and calls the API server it is given;
// one replica gets no PodDisruptionBudget (it would block every drain).
func TestE2EChartWebhookOnly(t *testing.T) {
	o := objects(t, tool(t, "helm", "template", "patch", chart, "--namespace", "oomguard",
		"--set", "nodeAgent.enabled=false", "--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={r.example/base/*}",
		"--set", "podMonitor.enabled=true", "--set", "imagepatchWebhook.replicas=1", "--set", "imagepatchWebhook.hostNetwork=true",
		"--set", "imagepatchWebhook.port=9443", "--set", "apiServer=https://10.0.0.1:6443", "--api-versions", "monitoring.coreos.com/v1/PodMonitor"))
	for _, kind := range []string{"DaemonSet", "ConfigMap", "hook Job", "PodMonitor", "PodDisruptionBudget"} {
		if _, ok := o[kind]; ok {
			t.Errorf("a %s in a release without the node agent and one replica", kind)
		}
	}
	// Its PodMonitor scrapes the port the container names, on the node's network too.
	if pm, ok := o["webhook PodMonitor"].(*podMonitor); !ok || pm.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "imagepatch-webhook" ||
		len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port != "metrics" || pm.Spec.PodMetricsEndpoints[0].Interval != "30s" {
		t.Errorf("the webhook's PodMonitor: %+v", o["webhook PodMonitor"])
	}
	d, ok := o["Deployment"].(*appsv1.Deployment)
	if !ok {
		t.Fatalf("no webhook Deployment: %v", o)
	}
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet || c.Ports[0].ContainerPort != 9443 ||
		!strings.Contains(args, "--listen=$(POD_IP):9443") || !strings.Contains(args, "--metrics-address=$(POD_IP):9742") ||
		!strings.Contains(args, "--api-server=https://10.0.0.1:6443") || !strings.Contains(args, "--tls-hosts=patch-oomguard-imagepatch-webhook.oomguard.svc,") {
		t.Fatalf("the webhook on the node's network: hostNetwork %v dnsPolicy %s ports %v args %s", spec.HostNetwork, spec.DNSPolicy, c.Ports, args)
	}
	if env := c.Env[len(c.Env)-1]; env.Name != "POD_IP" || env.ValueFrom == nil || env.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Fatalf("POD_IP: %+v", c.Env)
	}
	svc := o["Service"].(*corev1.Service)
	if svc.Spec.Ports[0].TargetPort.String() != "https" {
		t.Fatalf("the Service's target: %+v", svc.Spec.Ports)
	}

	o = objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "oomguard",
		"--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={r.example/base/*}"))
	spec = o["Deployment"].(*appsv1.Deployment).Spec.Template.Spec
	if spec.HostNetwork || !strings.Contains(strings.Join(spec.Containers[0].Args, " "), "--listen=:8443") || o["DaemonSet"] == nil {
		t.Fatalf("by default: the pod network, port 8443, with the node agent: %+v", spec)
	}
	if pdb, ok := o["PodDisruptionBudget"].(*policyv1.PodDisruptionBudget); !ok || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Fatalf("two replicas keep one through a drain: %+v", o["PodDisruptionBudget"])
	}
}

// The webhook guarded: its limits on the work a caller causes, the API
// server's client certificate required when a CA is given, and a
// NetworkPolicy admitting only the API server to its HTTPS port and the
// monitoring namespace and nodes to its metrics; a policy that would admit
// nothing, or could not apply (hostNetwork), is refused at install.
func TestE2EChartWebhookGuarded(t *testing.T) {
	base := []string{"template", "oomguard", chart, "--namespace", "oomguard",
		"--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={r.example/base/*}"}
	render := func(show string, set ...string) string {
		args := append(append([]string{}, base...), "--show-only", "templates/"+show)
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return tool(t, "helm", args...)
	}
	args := func(rendered string) (string, *appsv1.Deployment) {
		d := objects(t, rendered)["Deployment"].(*appsv1.Deployment)
		return strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "), d
	}

	// By default: the limits, no client certificate, no policy.
	a, _ := args(render("imagepatch-webhook.yaml"))
	for _, want := range []string{"--max-concurrent-patches=4", "--max-patches-per-minute=30", "--max-patches-per-repository=5"} {
		if !strings.Contains(a, want) {
			t.Errorf("by default the webhook's args lack %s: %s", want, a)
		}
	}
	if strings.Contains(a, "--client-ca") || strings.Contains(a, "--sign-key") || strings.Contains(a, "--ca-file") {
		t.Errorf("a client CA, a signing key or a registry CA by default: %s", a)
	}
	// A signing key as cosign generate-key-pair k8s://… makes it, and a
	// private registry CA: each file mounted from its object, the password
	// from the Secret.
	a, d := args(render("imagepatch-webhook.yaml", "imagepatchWebhook.signingKeySecret=cosign-key", "imagepatchWebhook.registryCAConfigMap=registry-ca"))
	c := d.Spec.Template.Spec.Containers[0]
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		switch {
		case v.Secret != nil:
			vols[v.Name] = v.Secret.SecretName
		case v.ConfigMap != nil:
			vols[v.Name] = v.ConfigMap.Name
		}
	}
	password := false
	for _, e := range c.Env {
		password = password || e.Name == "COSIGN_PASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == "cosign-key" && e.ValueFrom.SecretKeyRef.Key == "cosign.password"
	}
	if a, _ := args(render("imagepatch-webhook.yaml", "imagepatchWebhook.signingKeySecret=cosign-key", "imagepatchWebhook.signatureFormat=bundle")); !strings.Contains(a, "--signature-format=bundle") {
		t.Errorf("signatureFormat bundle: args %s", a)
	}
	if _, errb, err := run(t, "helm", append(append([]string{}, base...), "--set", "imagepatchWebhook.signatureFormat=cosign")...); err == nil || !strings.Contains(errb, "signatureFormat") {
		t.Errorf("an unknown signature format rendered: %v %s", err, errb)
	}
	if !strings.Contains(a, "--sign-key=/etc/oomguard/signing/cosign.key") || !strings.Contains(a, "--signature-format=sig") || !strings.Contains(a, "--ca-file=/etc/oomguard/registry-ca/ca.crt") ||
		mounts["signing"] != "/etc/oomguard/signing" || vols["signing"] != "cosign-key" ||
		mounts["registry-ca"] != "/etc/oomguard/registry-ca" || vols["registry-ca"] != "registry-ca" || !password {
		t.Errorf("a signing key and a registry CA: args %s, mounts %v, volumes %v, password from the Secret %v", a, mounts, vols, password)
	}
	if _, errb, err := run(t, "helm", append(append([]string{}, base...), "--show-only", "templates/imagepatch-webhook-networkpolicy.yaml")...); err == nil || !strings.Contains(errb, "could not find template") {
		t.Errorf("a NetworkPolicy by default: %v %s", err, errb)
	}

	// The client CA and names, mounted from the ConfigMap.
	a, d = args(render("imagepatch-webhook.yaml", "imagepatchWebhook.clientCA.configMap=apiserver-client-ca",
		"imagepatchWebhook.clientCA.names={kube-apiserver,apiserver-webhook-client}", "imagepatchWebhook.limits.patchesPerMinute=7"))
	if !strings.Contains(a, "--client-ca=/etc/oomguard/client-ca/ca.crt --client-names=kube-apiserver,apiserver-webhook-client") ||
		!strings.Contains(a, "--max-patches-per-minute=7") {
		t.Fatalf("the client CA's args: %s", a)
	}
	var mounted bool
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == "apiserver-client-ca" && len(v.ConfigMap.Items) == 1 && v.ConfigMap.Items[0].Key == "ca.crt" {
			for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
				mounted = mounted || m.Name == v.Name && m.MountPath == "/etc/oomguard/client-ca" && m.ReadOnly
			}
		}
	}
	if !mounted {
		t.Fatalf("the client CA's ConfigMap is not mounted: %+v", d.Spec.Template.Spec.Volumes)
	}

	// The policy.
	docs := documents(t, render("imagepatch-webhook-networkpolicy.yaml", "imagepatchWebhook.networkPolicy.enabled=true",
		"imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.10/32,10.0.0.11/32}", "imagepatchWebhook.networkPolicy.nodeCIDRs={10.1.0.0/16}",
		"imagepatchWebhook.networkPolicy.apiServerPeers[0].podSelector.matchLabels.k8s-app=konnectivity-agent",
		"imagepatchWebhook.networkPolicy.apiServerPeers[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system"))
	if len(docs) != 1 {
		t.Fatalf("%d documents, want the NetworkPolicy", len(docs))
	}
	var np networkingv1.NetworkPolicy
	dec := json.NewDecoder(bytes.NewReader(docs[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&np); err != nil || np.Kind != "NetworkPolicy" {
		t.Fatalf("the NetworkPolicy does not decode strictly: %v\n%s", err, docs[0])
	}
	if got := np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"]; got != "imagepatch-webhook" ||
		!reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 2 {
		t.Fatalf("the policy selects %q, types %v, %d rules", got, np.Spec.PolicyTypes, len(np.Spec.Ingress))
	}
	https, metrics := np.Spec.Ingress[0], np.Spec.Ingress[1]
	if len(https.Ports) != 1 || https.Ports[0].Port.String() != "https" || len(https.From) != 3 ||
		https.From[0].IPBlock.CIDR != "10.0.0.10/32" || https.From[1].IPBlock.CIDR != "10.0.0.11/32" ||
		https.From[2].PodSelector.MatchLabels["k8s-app"] != "konnectivity-agent" || https.From[2].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" {
		t.Fatalf("the HTTPS port admits %+v on %+v, want the API server's addresses and peers only", https.From, https.Ports)
	}
	if len(metrics.Ports) != 1 || metrics.Ports[0].Port.String() != "metrics" || len(metrics.From) != 2 ||
		metrics.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || metrics.From[1].IPBlock.CIDR != "10.1.0.0/16" {
		t.Fatalf("the metrics port admits %+v on %+v, want the monitoring namespace and the nodes", metrics.From, metrics.Ports)
	}

	// Refused: a policy that admits nothing, one that cannot apply, a value out of range.
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"imagepatchWebhook.networkPolicy.enabled=true"}, "apiServerCIDRs: name the addresses"},
		{[]string{"imagepatchWebhook.networkPolicy.enabled=true", "imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.10/32}", "imagepatchWebhook.hostNetwork=true"}, "does not apply to a pod on the node's network"},
		{[]string{"imagepatchWebhook.networkPolicy.enabled=true", "imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.10}"}, "apiServerCIDRs"},
		{[]string{"imagepatchWebhook.limits.concurrentPatches=0"}, "concurrentPatches"},
		{[]string{"imagepatchWebhook.networkPolicy.enabled=true", "imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.300/40}"}, "apiServerCIDRs"},
		{[]string{"imagepatchWebhook.networkPolicy.enabled=true", "imagepatchWebhook.networkPolicy.apiServerCIDRs={fd00::1/129}"}, "apiServerCIDRs"},
		{[]string{"imagepatchWebhook.networkPolicy.enabled=true", "imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.10/32}", "imagepatchWebhook.networkPolicy.nodeCIDRs={10.1.0.0/33}"}, "nodeCIDRs"},
		{[]string{"imagepatchWebhook.resources.limits.memory=64MB"}, "/imagepatchWebhook/resources/limits/memory"},
		{[]string{"resources.requests.cpu=half"}, "/resources/requests/cpu"},
	} {
		args := append([]string{}, base...)
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		if _, errb, err := run(t, "helm", args...); err == nil || !strings.Contains(errb, tc.want) {
			t.Errorf("%v: %v %s, want refused: %s", tc.set, err, errb, tc.want)
		}
	}
}

// failClosed: the admission policies (the mutating one where the API
// server serves it; the validating one on creation and update), the
// release's namespace left out, both the install
// and the plugin told; nothing of it by default or at uninstall, and a
// refusal where it cannot work (hook mode).
func TestE2EChartFailClosed(t *testing.T) {
	on := objects(t, tool(t, "helm", "template", "oomguard", chart, "--namespace", "ops", "--set", "failClosed.enabled=true",
		"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"))
	vap, ok := on["ValidatingAdmissionPolicy"].(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if !ok || len(vap.Spec.Validations) != 3 || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail ||
		!reflect.DeepEqual(vap.Spec.MatchConstraints.ResourceRules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) ||
		len(vap.Spec.MatchConditions) != 1 || vap.Spec.MatchConditions[0].Expression != `request.namespace != "ops"` {
		t.Fatalf("the validating policy: %+v", on["ValidatingAdmissionPolicy"])
	}
	vb, ok := on["ValidatingAdmissionPolicyBinding"].(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	if !ok || vb.Spec.PolicyName != vap.Name || !reflect.DeepEqual(vb.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) ||
		!reflect.DeepEqual(vb.Spec.MatchResources.NamespaceSelector.MatchLabels, map[string]string{"oomguard.io/fail-closed": "true"}) {
		t.Fatalf("the validating binding: %+v", on["ValidatingAdmissionPolicyBinding"])
	}
	mp, ok := on["MutatingAdmissionPolicy"].(*admissionregistrationv1beta1.MutatingAdmissionPolicy)
	if !ok || len(mp.Spec.Mutations) != 1 || !strings.Contains(mp.Spec.Mutations[0].ApplyConfiguration.Expression, `"required-plugins.noderesource.dev": "[\"oomguard\"]"`) {
		t.Fatalf("the mutating policy: %+v", on["MutatingAdmissionPolicy"])
	}
	if mb, ok := on["MutatingAdmissionPolicyBinding"].(*admissionregistrationv1beta1.MutatingAdmissionPolicyBinding); !ok || mb.Spec.PolicyName != mp.Name {
		t.Fatalf("the mutating binding: %+v", on["MutatingAdmissionPolicyBinding"])
	}
	spec := on["DaemonSet"].(*appsv1.DaemonSet).Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if (c.Name == "install" || c.Name == "oomguard-nri") != slices.Contains(c.Args, "--fail-closed") {
			t.Errorf("%s: %v", c.Name, c.Args)
		}
	}
	// Before Kubernetes 1.36 the pods must carry the annotation themselves.
	if older := objects(t, tool(t, "helm", "template", "oomguard", chart, "--set", "failClosed.enabled=true")); older["MutatingAdmissionPolicy"] != nil || older["ValidatingAdmissionPolicy"] == nil {
		t.Error("without admissionregistration.k8s.io/v1 MutatingAdmissionPolicy: the validating policy alone")
	}
	for _, args := range [][]string{nil, {"--set", "failClosed.enabled=true,mode=uninstall"}} {
		o := objects(t, tool(t, "helm", append([]string{"template", "oomguard", chart}, args...)...))
		for _, k := range []string{"ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"} {
			if o[k] != nil {
				t.Errorf("%v: %s rendered", args, k)
			}
		}
	}
	// Kubernetes 1.28 and 1.29 serve no ValidatingAdmissionPolicy v1: none is rendered there.
	if old := objects(t, tool(t, "helm", "template", "oomguard", chart, "--set", "failClosed.enabled=true", "--kube-version", "1.29.0")); old["ValidatingAdmissionPolicy"] != nil || old["own-node ValidatingAdmissionPolicy"] != nil {
		t.Error("Kubernetes 1.29: a ValidatingAdmissionPolicy v1 rendered")
	}
	if _, stderr, err := run(t, "helm", "template", "oomguard", chart, "--set", "failClosed.enabled=true,mode=hook"); err == nil || !strings.Contains(stderr, "failClosed.enabled: needs mode nri") {
		t.Errorf("hook mode failing closed: %v %s", err, stderr)
	}
}

// Every object the chart renders, whatever is enabled, carries the
// release's labels and its component (node-agent, imagepatch-webhook,
// monitoring, fail-closed, …): what `kubectl get -l …`, Argo CD and cost
// reports select by.
func TestE2EChartEveryObjectLabelled(t *testing.T) {
	for _, set := range [][]string{
		nil,
		{"events.enabled=true", "restartRuntime=true", "failClosed.enabled=true", "podMonitor.enabled=true", "prometheusRule.enabled=true", "grafanaDashboard.enabled=true"},
		{"imagepatchWebhook.enabled=true", "imagepatchWebhook.images={r.example/a/*}", "imagepatchWebhook.tls.certManager=true",
			"imagepatchWebhook.networkPolicy.enabled=true", "imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.10/32}"},
		{"imagepatchWebhook.enabled=true", "imagepatchWebhook.images={r.example/a/*}", "mode=hook"},
	} {
		args := []string{"template", "gpu", chart, "--namespace", "ops", "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
			"--api-versions", "monitoring.coreos.com/v1/PodMonitor", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
			"--api-versions", "cert-manager.io/v1/Issuer", "--api-versions", "cert-manager.io/v1/Certificate"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		for _, j := range documents(t, tool(t, "helm", args...)) {
			var head header
			json.Unmarshal(j, &head)
			if l := head.Metadata.Labels; l["app.kubernetes.io/part-of"] != "oomguard" || l["app.kubernetes.io/instance"] != "gpu" || l["helm.sh/chart"] == "" ||
				l["app.kubernetes.io/component"] == "" {
				t.Errorf("%v: %s %s has labels %v, want the release's", set, head.Kind, head.Metadata.Name, l)
			}
		}
	}
}
