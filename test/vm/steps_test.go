package vm

import "testing"

func TestSelected(t *testing.T) {
	const step = "TestE2EScenarios/cluster/containerd-2/helm_upgrade"
	for _, tc := range []struct {
		pattern string
		want    bool
	}{
		{"", true},
		{"E2E", true},
		{"TestE2EScenarios/cluster", true},
		{"TestE2EScenarios/cluster/containerd-2/helm_upgrade", true},
		{"E2E/cluster/containerd-2/upgrade", true},
		{"TestE2EScenarios/cluster/crio/helm_upgrade", false},
		{"TestE2EScenarios/cluster/containerd-2/uninstall", false},
		{"TestE2EScenarios/cluster/containerd-2/(helm_upgrade|uninstall)", true},
		{"TestE2EScenarios/cluster/containerd-[12]/helm_upgrade", true},
		{"TestE2EScenarios/doctor", false},
		{"Other", false},
	} {
		if got := selected(tc.pattern, step); got != tc.want {
			t.Errorf("-run %q on %s: %v, want %v", tc.pattern, step, got, tc.want)
		}
	}
}
