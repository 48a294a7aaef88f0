package nriplugin

import "testing"

func TestValidates(t *testing.T) {
	for _, tc := range []struct {
		runtime, version string
		want             bool
	}{
		{"containerd", "v2.4.2", true},
		{"containerd", "2.2.0", true},
		{"containerd", "2.2.0-rc.1", true},
		{"containerd", "2.1.4", false},
		{"containerd", "v1.7.35", false},
		{"containerd", "3.0.0", true},
		{"containerd", "2.10.1+unknown", true},
		{"cri-o", "1.36.3", true},
		{"cri-o", "1.34.11", true},
		{"cri-o", "1.33.5", false},
		{"CRI-O", "1.34.0", true},
		{"containerd", "", false},
		{"containerd", "v2", false},
		{"containerd", "2.x", false},
		{"podman", "5.0.0", false},
	} {
		if got := validates(tc.runtime, tc.version); got != tc.want {
			t.Errorf("validates(%q, %q) = %v, want %v", tc.runtime, tc.version, got, tc.want)
		}
	}
}
