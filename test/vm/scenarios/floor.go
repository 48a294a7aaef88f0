package scenarios

import (
	"fmt"

	"github.com/oomguard/oomguard/test/vm"
)

// floorInit is a guarded container's init: it reads its score, then tries,
// as the container's processes may (without CAP_SYS_RESOURCE), to put itself
// and a child back at kubelet's -997.
const floorInit = `#!/bin/sh
start=$(cat /proc/self/oom_score_adj)
if echo -997 > /proc/self/oom_score_adj 2>/dev/null; then lower=allowed; else lower=denied; fi
child=$(sh -c 'echo -997 > /proc/self/oom_score_adj 2>/dev/null && echo allowed || echo denied')
echo "@@RESULT floor=1 start=$start lower=$lower after=$(cat /proc/self/oom_score_adj) child=$child"
`

// floorScenario: the kernel lets a process lower its own oom_score_adj
// without CAP_SYS_RESOURCE down to its floor (oom_score_adj_min), which only
// a writer holding that capability moves. runc writes kubelet's -997 with
// it; the hook (from the host) and the plugin (through the runtime, or its
// own writes) write 900 with it, so the floor follows; the shim, inside an
// ordinary pod, raises the score without it, and the floor stays at -997.
func floorScenario() vm.Scenario {
	setup := func(fix string) func(g *vm.Guest) error {
		return func(g *vm.Guest) error {
			b, err := g.InitBundle("pod", floorInit, false)
			if err != nil {
				return err
			}
			vm.AsKubeletGuaranteed(b, 0)
			return vm.WithFix(g, b, fix)
		}
	}
	expect := func(start, lower, after string) func(r *vm.Run) error {
		return func(r *vm.Run) error {
			m := r.Result("floor")
			if m == nil || m["start"] != start || m["lower"] != lower || m["after"] != after || m["child"] != lower {
				return fmt.Errorf("the container reported %v, want start %s, lowering to -997 %s (itself and a child), ending at %s", m, start, lower, after)
			}
			return nil
		}
	}
	return vm.Scenario{
		Name:     "floor",
		Title:    "A guarded container's processes try to put themselves back at -997",
		MemoryMB: 256,
		Script: `run_pod pod
report
`,
		Variants: []vm.Variant{
			{Name: "without", Setup: setup(""), Check: expect("-997", "allowed", "-997")},
			{Name: "with-hook", Setup: setup("hook"), Check: expect("900", "denied", "900")},
			{Name: "with-nri", Setup: setup("nri"), Check: expect("900", "denied", "900")},
			// The shim alone raises the score but not the floor: documented.
			{Name: "with-shim", Setup: setup("shim"), Check: expect("900", "allowed", "-997")},
		},
	}
}
