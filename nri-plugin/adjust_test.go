package nriplugin

import (
	"strconv"
	"testing"

	"github.com/oomguard/oomguard/internal/enforce"
)

func TestAdjustment(t *testing.T) {
	ptr := func(v int) *int { return &v }
	off, on := false, true
	for name, tc := range map[string]struct {
		plan         enforce.Plan
		score, group string // "" for not adjusted
		none         bool
	}{
		"nothing":         {plan: enforce.Plan{}, none: true},
		"score":           {plan: enforce.Plan{Score: ptr(900)}, score: "900"},
		"group off":       {plan: enforce.Plan{Group: &off}, group: "0"},
		"group on":        {plan: enforce.Plan{Group: &on}, group: "1"},
		"both":            {plan: enforce.Plan{Score: ptr(-5), Group: &off}, score: "-5", group: "0"},
		"group dropped":   {plan: enforce.Plan{Score: ptr(900), Dropped: "unsupported on cgroup v1"}, score: "900"},
		"only a dropping": {plan: enforce.Plan{Dropped: "unsupported on cgroup v1"}, none: true},
	} {
		adj := adjustment(tc.plan)
		if tc.none {
			if adj != nil {
				t.Errorf("%s: want no adjustment, got %v", name, adj)
			}
			continue
		}
		score, group := "", ""
		if v := adj.GetLinux().GetOomScoreAdj(); v != nil {
			score = strconv.Itoa(int(v.GetValue()))
		}
		group = adj.GetLinux().GetResources().GetUnified()["memory.oom.group"]
		if score != tc.score || group != tc.group {
			t.Errorf("%s: score %q group %q, want %q %q", name, score, group, tc.score, tc.group)
		}
	}
}
