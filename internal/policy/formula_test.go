package policy

import (
	"strings"
	"testing"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/score"
)

const formulaConfig = `
[scores]
admission_inputs = %s

[[scores.band]]
min_priority = 1000
max_priority = 1000000000
min_oom_score_adj = 100
max_oom_score_adj = 499

[[scores.band]]
min_priority = -2147483648
max_priority = 999
min_oom_score_adj = 500
max_oom_score_adj = 999

[[rule]]
name = "batch"
oom_score_adj = "priority"
[rule.match]
namespaces = ["batch"]

[[rule]]
name = "gpu"
oom_score_adj = "logarithmic"
[rule.match]
namespaces = ["gpu"]

[[rule]]
name = "kubelet"
oom_score_adj = "linear"
[rule.match]
namespaces = ["ref"]
`

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
	ti = int64(1) << 40
)

// burstable is a Burstable container as NRI tells of it on a 2 TiB node,
// kubelet's own score in its spec, its request where Memory QoS wrote it.
func burstable(ns string, request int64) *Facts {
	kubelet := score.KubeletLinear(request, 2*ti)
	return &Facts{Namespace: ns, Container: "main", QoS: QoSBurstable, OOMScoreAdj: &kubelet,
		Annotations: map[string]string{},
		Inputs: score.Inputs{
			Request:  score.Input{Value: request, From: score.FromMemoryMin},
			Limit:    score.Input{From: score.FromLimit},
			Capacity: score.Input{Value: 2 * ti, From: score.FromMeminfo},
		}}
}

func formulaPolicy(t *testing.T, trust bool) *Policy {
	return parse(t, strings.Replace(formulaConfig, "%s", map[bool]string{true: "true", false: "false"}[trust], 1))
}

func TestFormulaRules(t *testing.T) {
	p := formulaPolicy(t, false)
	for _, c := range []struct {
		ns      string
		request int64
		want    int
	}{
		{"gpu", 50 * mi, 581}, {"gpu", 500 * mi, 553}, {"gpu", 4 * gi, 527}, {"gpu", 64 * gi, 493},
		{"ref", 50 * mi, 999}, {"ref", 64 * gi, 969},
	} {
		d := p.Decide(burstable(c.ns, c.request))
		if d.OOMScoreAdj == nil || *d.OOMScoreAdj != c.want || d.Missing != "" {
			t.Errorf("%s, request %d: %s missing %q; want %d (%v)", c.ns, c.request, describe(d), d.Missing, c.want, d.Reasons)
		}
	}
	g := burstable("gpu", gi)
	g.QoS = QoSGuaranteed
	if d := p.Decide(g); d.OOMScoreAdj == nil || *d.OOMScoreAdj != -997 {
		t.Errorf("Guaranteed: %s, want kubelet's -997", describe(d))
	}
	be := burstable("gpu", 0)
	be.QoS, be.Inputs.Request = QoSBestEffort, score.Input{}
	if d := p.Decide(be); d.OOMScoreAdj == nil || *d.OOMScoreAdj != 1000 {
		t.Errorf("BestEffort: %s, want 1000", describe(d))
	}
}

// An input nobody vouched for keeps the spec's score, and says which.
func TestFormulaFallsBack(t *testing.T) {
	p := formulaPolicy(t, false)
	noRequest := burstable("gpu", gi)
	noRequest.Inputs.Request = score.Input{}
	if d := p.Decide(noRequest); d.OOMScoreAdj != nil || d.Missing != "request" || d.Rule != "gpu" {
		t.Errorf("no request: %s missing %q", describe(d), d.Missing)
	}
	if d := p.Decide(burstable("batch", gi)); d.OOMScoreAdj != nil || d.Missing != "priority" {
		t.Errorf("no priority: %s missing %q", describe(d), d.Missing)
	}
	noCap := burstable("ref", gi)
	noCap.Inputs.Capacity = score.Input{}
	if d := p.Decide(noCap); d.OOMScoreAdj != nil || d.Missing != "capacity" {
		t.Errorf("no capacity: %s missing %q", describe(d), d.Missing)
	}
	c, _ := config.Parse([]byte(`[scores]
capacity = "4Ti"
[[rule]]
name = "r"
oom_score_adj = "logarithmic"`))
	withCap, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if d := withCap.Decide(noCap); d.OOMScoreAdj == nil || *d.OOMScoreAdj != score.Log(gi, 0, 4*ti) {
		t.Errorf("scores.capacity: %s", describe(d))
	}
}

// The annotation counts only where the configuration trusts it, and never
// where kubelet's own score contradicts it.
func TestAdmissionInputs(t *testing.T) {
	withAnnotation := func(ns, v string) *Facts {
		f := burstable(ns, 0)
		f.Inputs.Request = score.Input{}
		f.Annotations[score.AnnotationInputs] = v
		pr, req, err := score.ParseInputs(v, f.Container)
		if err != nil {
			t.Fatal(err)
		}
		f.Inputs.Priority, f.Inputs.Request = pr, req
		return f
	}
	trusting, distrusting := formulaPolicy(t, true), formulaPolicy(t, false)
	f := withAnnotation("batch", "priority=5000;requests=main:52428800")
	if d := trusting.Decide(f); d.OOMScoreAdj == nil || *d.OOMScoreAdj != 382 {
		t.Errorf("trusted: %s (%v)", describe(d), d.Reasons)
	}
	if d := distrusting.Decide(f); d.OOMScoreAdj != nil || d.Missing != "request" {
		t.Errorf("not trusted: %s missing %q", describe(d), d.Missing)
	}
	// A pod claiming 64Gi where kubelet scored 999 (under ~2 GiB) on its own spec.
	forged := withAnnotation("gpu", "priority=0;requests=main:68719476736")
	if d := trusting.Decide(forged); d.OOMScoreAdj != nil {
		t.Errorf("a request larger than kubelet's: %s", describe(d))
	}
	// A node-critical priority kubelet did not give -997.
	crit := withAnnotation("gpu", "priority=2000001000;requests=main:1048576")
	if d := trusting.Decide(crit); d.OOMScoreAdj != nil && *d.OOMScoreAdj < 0 {
		t.Errorf("a forged node-critical priority: %s", describe(d))
	}
	// The runtime's request wins over the annotation's.
	both := burstable("gpu", 50*mi)
	both.Annotations[score.AnnotationInputs] = "priority=0;requests=main:1"
	both.Inputs.Priority = score.Input{Value: 0, From: score.FromAdmission}
	if d := trusting.Decide(both); d.OOMScoreAdj == nil || *d.OOMScoreAdj != 581 {
		t.Errorf("runtime and annotation: %s", describe(d))
	}
}

// Annotations may still only raise a formula's score.
func TestFormulaAndAnnotations(t *testing.T) {
	p := formulaPolicy(t, false)
	f := burstable("gpu", 64*gi)
	f.Annotations[AnnotationOOMScoreAdjAlias] = "100"
	d := p.Decide(f)
	if d.OOMScoreAdj == nil || *d.OOMScoreAdj != 493 || len(d.Rejected) != 1 {
		t.Errorf("an annotation below the formula's 493: %s", describe(d))
	}
	f.Annotations[AnnotationOOMScoreAdjAlias] = "900"
	if d := p.Decide(f); d.OOMScoreAdj == nil || *d.OOMScoreAdj != 900 {
		t.Errorf("an annotation above it: %s", describe(d))
	}
}

func TestFormulaConfig(t *testing.T) {
	for _, bad := range []string{
		"[[rule]]\nname = \"r\"\noom_score_adj = \"quadratic\"",
		"[[rule]]\nname = \"r\"\noom_score_adj = \"priority\"",
		"[[rule]]\nname = \"r\"\noom_score_adj = 1001",
		"[[rule]]\nname = \"r\"\noom_score_adj = 1.5",
		"[scores]\ncapacity = \"2Tb\"",
		"[scores]\ncapacity = \"-1\"",
		"[[scores.band]]\nmin_priority = 5\nmax_priority = 1\nmin_oom_score_adj = 0\nmax_oom_score_adj = 1",
		"[[scores.band]]\nmin_priority = 1\nmax_priority = 5\nmin_oom_score_adj = 10\nmax_oom_score_adj = 1",
		"[[scores.band]]\nmin_priority = 1\nmax_priority = 5\nmin_oom_score_adj = 0\nmax_oom_score_adj = 1001",
	} {
		if _, err := config.Parse([]byte(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
	for v, want := range map[string]int64{"2Ti": 2 * ti, "512Gi": 512 * gi, "1T": 1e12, "1024": 1024} {
		if got, err := config.ParseBytes(v); err != nil || got != want {
			t.Errorf("%s: %d, %v", v, got, err)
		}
	}
}
