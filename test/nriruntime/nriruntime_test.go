package nriruntime

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/opencontainers/runtime-spec/specs-go"
)

func TestApplyAdjustment(t *testing.T) {
	score := -997
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"/sbin/init"}, OOMScoreAdj: &score},
		Linux: &specs.Linux{Resources: &specs.LinuxResources{Unified: map[string]string{"memory.oom.group": "1"}}}}
	adj := &api.ContainerAdjustment{}
	v := 900
	adj.SetLinuxOomScoreAdj(&v)
	adj.AddLinuxUnified("memory.oom.group", "0")
	if err := ApplyAdjustment(spec, adj); err != nil {
		t.Fatal(err)
	}
	if *spec.Process.OOMScoreAdj != 900 || spec.Linux.Resources.Unified["memory.oom.group"] != "0" {
		t.Fatalf("spec after adjustment: score %d, unified %v", *spec.Process.OOMScoreAdj, spec.Linux.Resources.Unified)
	}
}
