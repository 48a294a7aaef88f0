// Package scenarios is the VM tier's incidents, each reproduced without
// oomguard and ended with each part of it, on the harness of package vm:
// one file a scenario, what the VM runs, once per variant, and what each
// variant must show. All lists them; TestE2EScenarios boots them.
package scenarios

import "github.com/oomguard/oomguard/test/vm"

// All lists every scenario, in the order the demo tells them.
func All() []vm.Scenario {
	return []vm.Scenario{cgroupOOM(), globalOOM(), floorScenario(), doctorScenario(), killOrderScenario(), consoleScenario(), criLifecycle(),
		kubeScenario("kubelet-containerd", vm.Containerd2,
			vm.Variant{Name: "report-only", Setup: reportOnlySetup(vm.Containerd2), Check: reportOnly},
			vm.Variant{Name: "with-nri", Check: guarded}),
		kubeScenario("kubelet-crio", vm.CRIO,
			vm.Variant{Name: "report-only", Setup: reportOnlySetup(vm.CRIO), Check: reportOnly},
			vm.Variant{Name: "with-nri", Check: guarded},
			vm.Variant{Name: "with-hook", Check: hookGuarded}),
		// containerd 1.7.35 through the API server in the cluster scenario;
		// here 1.7.25, NRI 0.6, the oldest the plugin supports.
		kubeScenario("kubelet-containerd-1.7", vm.Containerd17,
			// The verifier off (60 s): only the exec watcher sets an exec'd process.
			vm.Variant{Name: "with-nri-1.7.25", Setup: kubeSetupVerifying(vm.Containerd17Old, "60s", true), Check: execWatched}),
		clusterScenario(),
	}
}
