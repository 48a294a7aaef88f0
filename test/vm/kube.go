package vm

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// kubeletConfig runs kubelet standalone: static pods from a directory, no API
// server, the cgroupfs driver with kubelet's QoS cgroups, the runtime's CRI.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
fileCheckFrequency: 1s
syncFrequency: 5s
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failSwapOn: false
enableServer: false
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
localStorageCapacityIsolation: false
evictionHard: {}
makeIPTablesUtilChains: false
resolvConf: ""
`

// WithKubelet puts a real kubelet (make components) into the VM, configured
// for rt's CRI; scripts start it with start_kubelet and add static pods with
// add_pod. Pods are written with Pod.
func WithKubelet(g *Guest, rt Runtime) error {
	p, err := g.env.Component(cmp.Or(rt.Kubelet, KubeletNewest), "kubelet")
	if err != nil {
		return err
	}
	if err := g.CopyFile("/usr/local/bin/kubelet", p); err != nil {
		return err
	}
	g.File("/etc/kubernetes/kubelet.yaml", []byte(fmt.Sprintf(kubeletConfig, rt.Socket)), 0o644)
	// kubelet's user namespace mappings need these, without a "kubelet" user
	// (whose mappings it would ask getsubids for); machine-id silences a warning.
	g.File("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	g.File("/etc/group", []byte("root:x:0:\n"), 0o644)
	g.File("/etc/machine-id", []byte("6f5c0c1a9d2b4e7f8a1b2c3d4e5f6a7b\n"), 0o644)
	for _, d := range []string{"/etc/kubernetes/manifests", "/var/lib/kubelet", "/var/log/pods", "/pods"} {
		g.a.mkdirAll(d)
	}
	return nil
}

// Pod is a static pod as an operator writes one: host network (no CNI in
// the VM), its image already on the node, one container.
type Pod struct {
	Name, Namespace string
	Command         []string
	// Memory is the container's request and limit ("48Mi"): with CPU too, a
	// Guaranteed pod. Empty: BestEffort.
	Memory      string
	Annotations map[string]string
	Labels      map[string]string
	Container   string // the container's name, main unless given
	Image       string // WorkloadImage unless given
	// RuntimeClass is the pod's runtimeClassName (through an API server).
	RuntimeClass string
	// CPU is the pod's CPU request and limit, 100m unless given; "none"
	// leaves CPU out (with Memory, a Burstable pod).
	CPU string
	// Privileged: a VM-like pod that manages its own cgroups, as systemd
	// does (the cgroup filesystem writable).
	Privileged bool
}

// File puts the pod's manifest at /pods/NAME.yaml in the VM, for add_pod.
func (p Pod) File(g *Guest) {
	g.File("/pods/"+p.Name+".yaml", []byte(p.Manifest()), 0o644)
}

func (p Pod) Manifest() string {
	var b strings.Builder
	ns := p.Namespace
	if ns == "" {
		ns = "default"
	}
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n", p.Name, ns)
	writeMap(&b, "  annotations", p.Annotations)
	writeMap(&b, "  labels", p.Labels)
	b.WriteString("spec:\n  hostNetwork: true\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  automountServiceAccountToken: false\n")
	if p.RuntimeClass != "" {
		fmt.Fprintf(&b, "  runtimeClassName: %s\n", p.RuntimeClass)
	}
	ctr, image := cmp.Or(p.Container, "main"), cmp.Or(p.Image, WorkloadImage)
	fmt.Fprintf(&b, "  containers:\n  - name: %s\n    image: %s\n    imagePullPolicy: Never\n    command:\n", ctr, image)
	for _, a := range p.Command {
		fmt.Fprintf(&b, "    - %q\n", a)
	}
	if p.Privileged {
		b.WriteString("    securityContext: {privileged: true}\n")
	}
	if p.Memory != "" {
		switch cpu := cmp.Or(p.CPU, "100m"); cpu {
		case "none":
			fmt.Fprintf(&b, "    resources:\n      requests: {memory: %s}\n      limits: {memory: %s}\n", p.Memory, p.Memory)
		default:
			fmt.Fprintf(&b, "    resources:\n      requests: {cpu: %s, memory: %s}\n      limits: {cpu: %s, memory: %s}\n", cpu, p.Memory, cpu, p.Memory)
		}
	}
	return b.String()
}

func writeMap(b *strings.Builder, key string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintf(b, "%s:\n", key)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(b, "    %q: %q\n", k, m[k])
	}
}
