package facts

import "testing"

// kubelet creates containers by image ID; the name is what rules on images match.
func TestImage(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, runtime string
		ann           map[string]string
		want          string
	}{
		{"containerd", RuntimeContainerd, map[string]string{containerdImage: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"cri-o by name", RuntimeCRIO, map[string]string{crioImage: "registry.example/vm:1", crioImageName: "registry.example/other:2"}, "registry.example/vm:1"},
		{"cri-o by id", RuntimeCRIO, map[string]string{crioImage: id, crioImageName: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"cri-o by sha256 id", RuntimeCRIO, map[string]string{crioImage: "sha256:" + id, crioImageName: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"cri-o id only", RuntimeCRIO, map[string]string{crioImage: id}, id},
		{"cri-o name only", RuntimeCRIO, map[string]string{crioImageName: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"unknown runtime", RuntimeUnknown, map[string]string{containerdImage: "x", crioImage: "y"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Image(tc.runtime, tc.ann); got != tc.want {
				t.Fatalf("Image = %q, want %q", got, tc.want)
			}
		})
	}
}
