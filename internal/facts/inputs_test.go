package facts

import (
	"testing"

	"github.com/oomguard/oomguard/internal/score"
)

// What the runtime's spec vouches for: the limit (none where it gives
// resources without one), the request where Memory QoS wrote it ("0" says
// nothing), and the annotation's values marked as the annotation's.
func TestInputs(t *testing.T) {
	limit := int64(1 << 30)
	zero := int64(0)
	ann := map[string]string{score.AnnotationInputs: "priority=7;requests=main:4096,side:0"}
	for _, c := range []struct {
		name         string
		hasResources bool
		limit        *int64
		unified      map[string]string
		ann          map[string]string
		want         score.Inputs
	}{
		{"nothing", false, nil, nil, nil, score.Inputs{}},
		{"no limit", true, nil, nil, nil, score.Inputs{Limit: score.Input{From: score.FromLimit}}},
		{"limit 0", true, &zero, nil, nil, score.Inputs{Limit: score.Input{From: score.FromLimit}}},
		{"memory.min", true, &limit, map[string]string{"memory.min": "1024", "memory.low": "2048"}, nil,
			score.Inputs{Limit: score.Input{Value: limit, From: score.FromLimit}, Request: score.Input{Value: 1024, From: "memory.min"}}},
		{"memory.low", true, &limit, map[string]string{"memory.min": "0", "memory.low": "2048"}, nil,
			score.Inputs{Limit: score.Input{Value: limit, From: score.FromLimit}, Request: score.Input{Value: 2048, From: "memory.low"}}},
		{"zeros say nothing", true, nil, map[string]string{"memory.min": "0", "memory.low": "0"}, nil,
			score.Inputs{Limit: score.Input{From: score.FromLimit}}},
		{"garbage", true, nil, map[string]string{"memory.min": "max", "memory.low": "-5"}, nil,
			score.Inputs{Limit: score.Input{From: score.FromLimit}}},
		{"annotation", true, nil, nil, ann,
			score.Inputs{Limit: score.Input{From: score.FromLimit}, Request: score.Input{Value: 4096, From: score.FromAdmission}, Priority: score.Input{Value: 7, From: score.FromAdmission}}},
		{"runtime's request first", true, nil, map[string]string{"memory.min": "10"}, ann,
			score.Inputs{Limit: score.Input{From: score.FromLimit}, Request: score.Input{Value: 10, From: "memory.min"}, Priority: score.Input{Value: 7, From: score.FromAdmission}}},
		{"malformed annotation", true, nil, nil, map[string]string{score.AnnotationInputs: "priority=7;requests=main"},
			score.Inputs{Limit: score.Input{From: score.FromLimit}}},
	} {
		if got := Inputs(c.hasResources, c.limit, c.unified, c.ann, "main"); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
