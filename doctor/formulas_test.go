package doctor

import (
	"fmt"
	"strings"
	"testing"

	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cri"
	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/internal/score"
)

// On a 2 TiB node the doctor ranks four Burstable containers apart by the
// logarithmic formula where kubelet's linear one puts three at 999, from
// what the runtime started them with; a pod's own annotation counts only
// where the configuration trusts it.
func TestFormulasRank(t *testing.T) {
	const (
		mi = int64(1) << 20
		gi = int64(1) << 30
		ti = int64(1) << 40
	)
	capacity := score.Input{Value: 2 * ti, From: score.FromMeminfo}
	pol, err := policy.New(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	var ctrs []scoredCtr
	for i, r := range []int64{50 * mi, 500 * mi, 4 * gi, 64 * gi} {
		now := score.KubeletLinear(r, 2*ti)
		st := cri.Status{Spec: &rspec.Spec{Process: &rspec.Process{OOMScoreAdj: &now}, Linux: &rspec.Linux{
			CgroupsPath: fmt.Sprintf("kubepods-burstable-pod%d.slice:cri-containerd:c%d", i, i),
			Resources:   &rspec.LinuxResources{Unified: map[string]string{"memory.low": fmt.Sprint(r)}},
		}}}
		pod := &cri.Sandbox{ID: fmt.Sprint(i), Namespace: "gpu", Name: fmt.Sprintf("p%d", i)}
		ctrs = append(ctrs, scoreOf(pol, pod, cri.Container{ID: fmt.Sprint(i), Name: "main"}, st, capacity))
	}
	// A pod that claims a request in its annotation, on a node that does not trust it.
	now := 999
	forged := cri.Status{Spec: &rspec.Spec{Process: &rspec.Process{OOMScoreAdj: &now}, Linux: &rspec.Linux{
		CgroupsPath: "kubepods-burstable-podf.slice:cri-containerd:f", Resources: &rspec.LinuxResources{}}}}
	ctrs = append(ctrs, scoreOf(pol, &cri.Sandbox{Namespace: "gpu", Name: "forged",
		Annotations: map[string]string{score.AnnotationInputs: "priority=0;requests=main:1099511627776"}}, cri.Container{Name: "main"}, forged, capacity))
	f := formulasFinding(ctrs, capacity)
	want := []string{
		"1. gpu/p0/main: logarithmic 581, linear 999, now 999; request 50Mi (memory.low), limit none",
		"2. gpu/p1/main: logarithmic 553, linear 999, now 999; request 500Mi (memory.low), limit none",
		"3. gpu/p2/main: logarithmic 527, linear 999, now 999; request 4Gi (memory.low), limit none",
		"4. gpu/p3/main: logarithmic 493, linear 969, now 969; request 64Gi (memory.low), limit none",
		"-. gpu/forged/main: now 999; not scored: request unknown",
	}
	if strings.Join(f.Details, "\n") != strings.Join(want, "\n") {
		t.Errorf("details:\n%s\nwant:\n%s", strings.Join(f.Details, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(f.Summary, "5 containers on 2Ti: kubelet's linear formula gives 2 distinct scores (3 at 999), the logarithmic one 4;") {
		t.Errorf("summary: %s", f.Summary)
	}
}
