package scenarios

import (
	"fmt"

	"github.com/oomguard/oomguard/test/vm"
)

// A node as the incidents found it: a serial console at the kernel's default
// 9600 baud with the task dump on and printk at its usual level, some 70
// processes, and a VM-like pod (init as PID 1) with kubelet's settings.
const doctorInit = `#!/bin/sh
sleep 100000 &
sleep 100000 &
wait
`

func doctorScenario() vm.Scenario {
	setup := func(hook bool) func(g *vm.Guest) error {
		return func(g *vm.Guest) error {
			b, err := g.InitBundle("pod", doctorInit, false)
			if err != nil {
				return err
			}
			vm.AsKubeletGuaranteed(b, 64<<20)
			// kubelet's cgroupfs layout, so the doctor sees a pod container.
			b.Spec.Linux.CgroupsPath = "/kubepods/pod0c4f3a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b/ctr-vm"
			if hook {
				vm.WithHook(b)
			}
			return nil
		}
	}
	return vm.Scenario{
		Name:     "doctor",
		Title:    "oomguard-doctor examines a node like the incidents'",
		MemoryMB: 256,
		Script: `sysctl -w vm.oom_dump_tasks=1 >/dev/null
dmesg -n 7
i=0; while [ $i -lt 60 ]; do sleep 100000 & i=$((i+1)); done
start_pod pod
sleep 1
doctor
`,
		Variants: []vm.Variant{
			{Name: "without", Setup: setup(false), Check: func(r *vm.Run) error {
				if c, g := severity(r, "console"), severity(r, "group-kill"); c != "4" || g != "4" {
					return fmt.Errorf("console severity %s, group-kill severity %s: want both critical (4)", c, g)
				}
				return nil
			}},
			{Name: "with-hook", Setup: setup(true), Check: func(r *vm.Run) error {
				if c, g := severity(r, "console"), severity(r, "group-kill"); c != "4" || g != "0" {
					return fmt.Errorf("console severity %s, group-kill severity %s: want 4 (the hook does not change the console) and 0", c, g)
				}
				return nil
			}},
		},
	}
}

// severity is what the doctor said of check, 0 (ok) to 4 (critical).
func severity(r *vm.Run, check string) string { return severityAt(r, check, 0) }
