package scenarios

import (
	"errors"
	"fmt"
	"slices"

	"github.com/oomguard/oomguard/test/vm"
)

// A VM-like pod: its init starts two services and a runaway, under kubelet's
// Guaranteed settings, and the runaway hits the container's memory limit.
const vmLikeInit = `#!/bin/sh
sleep 1000 & s1=$!
sleep 1000 & s2=$!
tail /dev/zero & r=$!
wait $r; rc=$?
alive=0
for p in $s1 $s2; do kill -0 $p 2>/dev/null && alive=$((alive+1)); done
echo "@@RESULT pid1=alive services_alive=$alive runaway_exit=$rc"
`

func cgroupOOM() vm.Scenario {
	setup := func(fix string) func(g *vm.Guest) error {
		return func(g *vm.Guest) error {
			b, err := g.InitBundle("pod", vmLikeInit, false)
			if err != nil {
				return err
			}
			vm.AsKubeletGuaranteed(b, 48<<20)
			return vm.WithFix(g, b, fix)
		}
	}
	return vm.Scenario{
		Name:     "cgroup-oom",
		Title:    "A VM-like pod (init as PID 1) hits its memory limit",
		MemoryMB: 256,
		Script: `run_pod pod
report
`,
		Variants: []vm.Variant{
			{Name: "without", Setup: setup(""), Check: func(r *vm.Run) error {
				if r.Result("pid1") != nil {
					return errors.New("the container's init survived: memory.oom.group = 1 should have killed it with the runaway")
				}
				if got := r.Result("pod_exit"); got == nil || got["pod_exit"] != "137" {
					return fmt.Errorf("the container ended with %v, want exit 137 (SIGKILL)", got)
				}
				// The services die with the init, by the PID namespace's teardown.
				for _, want := range []string{"tail", "init"} {
					if !slices.Contains(r.KilledComms(), want) {
						return fmt.Errorf("the kernel killed %s, want the whole container (%s among them)", vm.Names(r.KilledComms()), want)
					}
				}
				return nil
			}},
			{Name: "with-hook", Setup: setup("hook"), Check: onlyRunawayDied},
			{Name: "with-nri", Setup: setup("nri"), Check: onlyRunawayDied},
		},
	}
}

func onlyRunawayDied(r *vm.Run) error {
	got := r.Result("pid1")
	if got == nil || got["services_alive"] != "2" {
		return fmt.Errorf("init and both services should live; init reported %v", got)
	}
	return vm.ExpectKilled(r, "tail")
}
