//go:build e2e

package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// inherent are the findings of kube-score a node agent that changes other
// containers' OOM settings cannot avoid, by kind and check; each is said
// with its reason in docs/install-cluster.md ("What checkers report").
var inherent = map[string]string{
	"DaemonSet: The container is privileged":                             "privileged plugin and init containers",
	"DaemonSet: The pod has a container with a writable root filesystem": "privileged containers",
	"DaemonSet: The container is running with a low user ID":             "root",
	"DaemonSet: The container running with a low group ID":               "root",
	"DaemonSet: CPU limit is not set":                                    "no CPU limit on the creation path",
	"DaemonSet: Ephemeral Storage request is not set":                    "unschedulable where the kubelet measures none",
	"DaemonSet: Ephemeral Storage limit is not set":                      "unschedulable where the kubelet measures none",
	"Deployment: Ephemeral Storage request is not set":                   "unschedulable where the kubelet measures none",
	"Deployment: Ephemeral Storage limit is not set":                     "unschedulable where the kubelet measures none",
	"Job: Ephemeral Storage request is not set":                          "unschedulable where the kubelet measures none",
	"Job: Ephemeral Storage limit is not set":                            "unschedulable where the kubelet measures none",
	"DaemonSet: The pod does not have a matching NetworkPolicy":          "the node's network",
	"DaemonSet: ImagePullPolicy is not set to Always":                    "pinned by digest",
	"Job: ImagePullPolicy is not set to Always":                          "pinned by digest",
	"Deployment: ImagePullPolicy is not set to Always":                   "pinned by digest",
	"Deployment: The pod does not have a matching egress NetworkPolicy":  "the registries pods name",
}

// finding is one line of kube-score's ci output: [LEVEL] NAME/NS GROUP/VERSION/KIND: (CONTAINER) MESSAGE.
var finding = regexp.MustCompile(`^\[(CRITICAL|WARNING)\] \S+ (?:\S+/)?(\w+): (?:\([^)]*\) )?(.*)$`)

// kube-score, as a platform team runs it on a chart, finds nothing in any
// ci values file's rendering but what is inherent to a node agent (and,
// where the ci file asks for the webhook on the node's network, its one
// replica and no NetworkPolicy).
func TestE2EChartCheckers(t *testing.T) {
	bin := filepath.Join(repo, "build/components/kubescore/kube-score")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run make components", err)
	}
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			rendered := filepath.Join(t.TempDir(), "rendered.yaml")
			out := tool(t, "helm", append([]string{"template", "oomguard", chart, "--namespace", "oomguard", "-f", f}, optionalAPIs...)...)
			if err := os.WriteFile(rendered, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			// kube-score exits 1 when it finds anything: its lines are what counts.
			res, _ := exec.Command(bin, "score", "--output-format", "ci", rendered).CombinedOutput()
			if !strings.Contains(string(res), "[OK]") {
				t.Fatalf("kube-score scored nothing:\n%s", res)
			}
			for _, l := range strings.Split(string(res), "\n") {
				m := finding.FindStringSubmatch(l)
				if m == nil {
					continue
				}
				key := m[2] + ": " + m[3]
				if _, ok := inherent[key]; ok {
					continue
				}
				if key == "Deployment: Deployment few replicas" && strings.Contains(out, "replicas: 1\n") ||
					key == "Deployment: The pod does not have a matching NetworkPolicy" && strings.Contains(out, "hostNetwork: true") {
					continue
				}
				t.Errorf("kube-score: %s", l)
			}
		})
	}
}
