package nriplugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/internal/score"
	"github.com/oomguard/oomguard/test/nriruntime"
)

const formulaRules = `
[scores]
admission_inputs = true

[[rule]]
name = "by-request"
oom_score_adj = "logarithmic"
[rule.match]
namespaces = ["gpu"]
qos = ["burstable"]
`

// Burstable containers on a 2 TiB node through NRI's runtime side: each
// gets the logarithmic formula's score from the request kubelet's Memory QoS
// wrote into its spec (memory.low, as under TieredReservation), where kubelet
// gives three of them 999; a pod that forges its inputs (the annotation,
// its own cgroup's memory.min) gets no lower score than kubelet's, and the
// missing input is logged and counted.
func TestFormulaScoresThroughNRI(t *testing.T) {
	const (
		mi = int64(1) << 20
		gi = int64(1) << 30
		ti = int64(1) << 40
	)
	type tc struct {
		ctr  *api.Container
		pod  *api.PodSandbox
		want string
	}
	var cases []tc
	add := func(name string, ann map[string]string, unified map[string]string, request int64, want string) {
		pod := nriruntime.KubeletPod(name, "gpu", "burstable", "runc", ann)
		ctr := nriruntime.KubeletContainer(pod, "main", score.KubeletLinear(request, 2*ti), "/app")
		ctr.Linux.Resources.Memory = &api.LinuxMemory{Limit: api.Int64(128 * gi)}
		for k, v := range unified {
			ctr.Linux.Resources.Unified[k] = v
		}
		cases = append(cases, tc{ctr, pod, want})
	}
	for _, c := range []struct {
		request int64
		want    int
	}{{50 * mi, 581}, {500 * mi, 553}, {4 * gi, 527}, {64 * gi, 493}} {
		// with a limit of 128Gi: 400·R/L lowers each a little
		want := score.Log(c.request, 128*gi, 2*ti)
		if c.request != 64*gi && score.KubeletLinear(c.request, 2*ti) != 999 {
			t.Fatalf("kubelet's score for %d: not 999", c.request)
		}
		add(fmt.Sprintf("r%d", c.request/mi), nil, map[string]string{"memory.low": fmt.Sprint(c.request), "memory.min": "0"}, c.request, fmt.Sprint(want))
	}
	add("forged-annotation", map[string]string{score.AnnotationInputs: "priority=0;requests=main:1099511627776"}, nil, 50*mi, "999")
	add("forged-cgroup", nil, nil, 50*mi, "999")
	var ctrs []*api.Container
	for _, c := range cases {
		ctrs = append(ctrs, c.ctr)
	}
	root := fixtureNode(t, ctrs, 1)
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/meminfo"), []byte(fmt.Sprintf("MemTotal:       %d kB\nMemFree: 1 kB\n", 2*ti>>10)), 0o644)
	forged := filepath.Join(root, "sys/fs/cgroup", mustResolve(t, cases[len(cases)-1].ctr.Linux.CgroupsPath), "memory.min")
	os.WriteFile(forged, []byte(fmt.Sprint(64*gi)), 0o644)
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	tp := connectPlugin(t, dir, formulaRules, root)
	seen := map[string]bool{}
	for _, c := range cases {
		createAndStart(t, rs, c.pod, c.ctr)
		got, _ := onNode(t, root, c.ctr)
		if got != c.want {
			t.Errorf("%s: score %s, want %s", c.pod.Name, got, c.want)
		}
		seen[got] = true
	}
	if len(seen) != 5 {
		t.Errorf("scores %v: want four distinct and kubelet's 999", seen)
	}
	logs := tp.log()
	if n := strings.Count(logs, `msg="score formula lacks an input; the spec's score kept" pod=gpu/pod-forged-`); n != 2 {
		t.Errorf("%d missing-input lines, want 2:\n%s", n, logs)
	}
	if n := counted(t, tp.p.m, "oomguard_score_inputs_missing_total"); n != 2 {
		t.Errorf("inputs missing counted %v, want 2", n)
	}
	if !strings.Contains(logs, "logarithmic formula: 581 from request 52428800 (memory.low), limit 137438953472 (runtime limit), capacity 2199023255552 (/proc/meminfo)") {
		t.Errorf("the decision's reasons do not name the inputs and who vouched for them:\n%s", logs)
	}
}
