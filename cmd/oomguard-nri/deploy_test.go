package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The manifests in deploy/ hold together: the DaemonSet mounts the socket
// the config names, runs node-critical, and uses the ConfigMap kustomize makes.
func TestDeployManifests(t *testing.T) {
	var kust struct {
		Resources          []string `yaml:"resources"`
		ConfigMapGenerator []struct {
			Name  string   `yaml:"name"`
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
	}
	readYAML(t, "../../deploy/kustomization.yaml", &kust)
	for _, r := range kust.Resources {
		if _, err := os.Stat(filepath.Join("../../deploy", r)); err != nil {
			t.Errorf("kustomization resource %s: %v", r, err)
		}
	}
	if len(kust.ConfigMapGenerator) != 1 || kust.ConfigMapGenerator[0].Name != "oomguard-config" {
		t.Fatalf("configMapGenerator: %+v", kust.ConfigMapGenerator)
	}
	f, err := os.Open("../../deploy/nri-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var ds map[string]any
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if doc["kind"] == "DaemonSet" {
			ds = doc
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	spec := dig(ds, "spec", "template", "spec")
	// Seen from another PID namespace, cgroup.procs lists the node's
	// processes as 0: Synchronize could fix a running container's group
	// but not its processes' scores.
	if spec["hostPID"] != true {
		t.Errorf("hostPID %v: the plugin must see the node's processes", spec["hostPID"])
	}
	if spec["priorityClassName"] != "system-node-critical" {
		t.Errorf("priorityClassName %v", spec["priorityClassName"])
	}
	ctr := spec["containers"].([]any)[0].(map[string]any)
	var args []string
	for _, a := range ctr["args"].([]any) {
		args = append(args, a.(string))
	}
	if !slices.Contains(args, "--socket=/var/run/nri/nri.sock") || !slices.Contains(args, "--root=/host") {
		t.Errorf("args %v", args)
	}
	var paths, configMaps []string
	for _, v := range spec["volumes"].([]any) {
		vol := v.(map[string]any)
		if hp, ok := vol["hostPath"].(map[string]any); ok {
			paths = append(paths, hp["path"].(string))
		}
		if cm, ok := vol["configMap"].(map[string]any); ok {
			configMaps = append(configMaps, cm["name"].(string))
		}
	}
	if !slices.Contains(paths, "/var/run/nri") || !slices.Contains(paths, "/proc") || !slices.Contains(paths, "/sys/fs/cgroup") {
		t.Errorf("hostPath volumes %v", paths)
	}
	if len(spec["containers"].([]any)) != 2 {
		t.Errorf("want the plugin and the doctor containers")
	}
	if !slices.Equal(configMaps, []string{"oomguard-config"}) {
		t.Errorf("configMaps %v", configMaps)
	}
	var help strings.Builder
	run([]string{"--help"}, &help, &help)
	usage := help.String()
	init := spec["initContainers"].([]any)[0].(map[string]any)
	for _, a := range init["args"].([]any) {
		if a := a.(string); a != "install" && !strings.Contains(usage, strings.SplitN(a, "=", 2)[0]) {
			t.Errorf("the init container passes %s, which install's usage does not document", a)
		}
	}
	if init["args"].([]any)[0] != "install" || !slices.Contains(paths, "/etc") {
		t.Errorf("the init container must run install against the node's root: %v, volumes %v", init["args"], paths)
	}
	if run([]string{"--bogus"}, &strings.Builder{}, &strings.Builder{}) != 2 {
		t.Error("unknown flag must exit 2")
	}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.Contains(usage, "--"+name) {
			t.Errorf("the DaemonSet passes --%s, which the usage does not document", name)
		}
	}
}

// The chart carries the shipped configuration (helm reads only files inside
// a chart); they must not drift apart.
func TestChartConfigIsTheShippedOne(t *testing.T) {
	if readShipped(t) != string(mustRead(t, "../../deploy/helm/oomguard/files/config.toml")) {
		t.Fatal("deploy/helm/oomguard/files/config.toml differs from deploy/config.toml: copy it over")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readYAML(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = m[k].(map[string]any)
	}
	return m
}
