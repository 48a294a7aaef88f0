// Package scenarios is the VM tier's incidents, each reproduced without
// oomguard and ended with each part of it, on the harness of package vm:
// one file a scenario, what the VM runs, once per variant, and what each
// variant must show. All lists them; TestE2EScenarios boots them.
package scenarios

import (
	"slices"

	"github.com/oomguard/oomguard/test/vm"
)

// All lists every scenario this run boots (vm.Matrix: every combination of
// kernel, kubelet and runtime, or the newest and the oldest), in the order
// the demo tells them. The scenarios of the kernel alone run on the newest
// kernel under their names, and in the matrix on each other as
// NAME@KERNEL; those of a runtime on the runtime's combination (vm.Runtime).
func All() []vm.Scenario {
	var all []vm.Scenario
	kernelOnly := []vm.Scenario{cgroupOOM(), globalOOM(), floorScenario(), doctorScenario(), killOrderScenario(), consoleScenario()}
	all = append(all, kernelOnly...)
	// The oldest kernel runs the runtimes' scenarios of the oldest
	// combination in every run; the kernel's alone, in the matrix.
	for _, k := range vm.Kernels {
		if k != vm.KernelNewest && vm.Matrix() {
			for _, s := range kernelOnly {
				all = append(all, onKernel(s, k))
			}
		}
	}
	all = append(all, criLifecycle(), lateJoining(vm.Selected(vm.Containerd2, vm.CRIO, vm.CRIO134)...))
	for _, rt := range vm.Selected(vm.Containerd2, vm.Containerd21) {
		all = append(all, kubeScenario(rt,
			vm.Variant{Name: "report-only", Setup: reportOnlySetup(rt), Check: reportOnly},
			vm.Variant{Name: "with-nri", Check: guarded}))
	}
	for _, rt := range vm.Selected(vm.CRIO, vm.CRIO134) {
		all = append(all, kubeScenario(rt,
			vm.Variant{Name: "report-only", Setup: reportOnlySetup(rt), Check: reportOnly},
			vm.Variant{Name: "with-nri", Check: guarded},
			vm.Variant{Name: "with-hook", Check: hookGuarded(rt)}))
	}
	// containerd 1.7.35 through the API server in the cluster scenario;
	// here 1.7.25, NRI 0.6, the oldest the plugin supports, with the
	// verifier off (60 s): only the exec watcher sets an exec'd process.
	all = append(all, kubeScenario(vm.Containerd17Old,
		vm.Variant{Name: "with-nri", Setup: kubeSetupVerifying(vm.Containerd17Old, "60s", true), Check: execWatched}))
	return append(all, clusterScenario())
}

// onKernel is s booted on kernel k, named s.Name@k.
func onKernel(s vm.Scenario, k vm.Kernel) vm.Scenario {
	s.Name += "@" + k.Name
	s.Variants = slices.Clone(s.Variants)
	for i := range s.Variants {
		s.Variants[i].Kernel = k.Name
	}
	return s
}
