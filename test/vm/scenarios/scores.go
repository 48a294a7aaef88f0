package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/score"
	"github.com/oomguard/oomguard/test/vm"
)

// scoresConfig is what the step adds to the configuration in force: a
// 2 TiB node for the formulas (the VM has 2.5 GiB), the chart's admission
// inputs trusted, and a rule scoring the namespace's Burstable pods by the
// logarithmic formula.
const scoresConfig = `
[scores]
capacity = "2Ti"
admission_inputs = true

[[rule]]
name = "scores-e2e"
oom_score_adj = "logarithmic"
[rule.match]
namespaces = ["scores"]
qos = ["Burstable"]
`

// scores: the chart's score inputs (scores.admissionInputs: its admission
// policies write each pod's requests and priority, the kubelet's Memory QoS
// reserving nothing by default) and a rule with the logarithmic formula:
// Burstable pods with different requests run at the formula's scores, in
// their processes; a pod that writes its own inputs into the annotation is
// admitted with its spec's and gets the score of its real request.
func (r *clusterRun) scores(ctx context.Context) error {
	base, err := os.ReadFile(filepath.Join(r.Dir(), "config-850.toml")) // the upgrade step's, in force
	if err != nil {
		return err
	}
	text := string(base) + scoresConfig
	f := filepath.Join(r.Dir(), "config-scores.toml")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		return err
	}
	if err := r.chart(ctx, "", "upgrade", "oomguard", "--reuse-values", "--set", "scores.admissionInputs=true", "--set-file", "config="+f); err != nil {
		return err
	}
	if err := r.pluginSays(ctx, `msg="configuration reloaded"`, "hash="+config.Hash([]byte(text))); err != nil {
		return err
	}
	if _, err := r.Kubectl(ctx, "create", "namespace", "scores"); err != nil {
		return err
	}
	defer r.Kubectl(ctx, "delete", "namespace", "scores", "--wait=false")
	const capacity = int64(2) << 40
	var got []string
	want := map[string]string{}
	pod := func(name, memory string, ann map[string]string) vm.Pod {
		return vm.Pod{Name: name, Namespace: "scores", Command: []string{"/bin/sleep", "2147483647"}, Memory: memory, CPU: "none", Annotations: ann}
	}
	var pods []vm.Pod
	for _, mi := range []int64{16, 32, 96, 256} { // a pod under 12Mi has no sandbox
		pods = append(pods, pod(fmt.Sprintf("s-%d", mi), fmt.Sprintf("%dMi", mi), nil))
		want[pods[len(pods)-1].Name] = strconv.Itoa(score.Log(mi<<20, mi<<20, capacity))
	}
	forged := pod("forged", "16Mi", map[string]string{score.AnnotationInputs: "priority=2000001000;requests=main:68719476736"})
	pods = append(pods, forged)
	want[forged.Name] = want["s-16"]
	for _, p := range pods {
		if _, err := r.StartPod(ctx, p); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, p := range pods {
		m, err := r.Inspect(ctx, "scores", p.Name, "main")
		if err != nil {
			return err
		}
		got = append(got, p.Name+"="+m["oom_score_adj"])
		if m["oom_score_adj"] != want[p.Name] {
			out, _ := r.sh(ctx, "plugin_log | grep ' pod=scores/"+p.Name+" ' | tail -3")
			return fmt.Errorf("pod %s runs at %s, want the logarithmic formula's %s; the plugin logged:\n%s", p.Name, m["oom_score_adj"], want[p.Name], out)
		}
		seen[m["oom_score_adj"]] = true
	}
	if len(seen) != 4 {
		return fmt.Errorf("scores %v: want four distinct", got)
	}
	ann, err := r.Kubectl(ctx, "-n", "scores", "get", "pod", "forged", "-o", `jsonpath={.metadata.annotations.score-inputs\.oomguard\.io}`)
	if err != nil || strings.TrimSpace(string(ann)) != "priority=0;requests=main:16777216" {
		return fmt.Errorf("the forged pod was admitted with %s=%q (%v), want its spec's", score.AnnotationInputs, ann, err)
	}
	r.Note("%s: score formulas, logarithmic on a 2Ti node (requests = limits of 16Mi, 32Mi, 96Mi, 256Mi, and a pod forging 64Gi): %s",
		r.rt.Component, strings.Join(got, " "))
	return nil
}
