package facts

import (
	"regexp"
	"strings"
	"testing"
)

// The bundle places as the runtimes write them, as regular expressions:
// what the hand-written checks must agree with.
var (
	containerdBundleRE = regexp.MustCompile(`/io\.containerd\.runtime\.v2\.task/[^/]+/[^/]+/?$`)
	crioBundleRE       = regexp.MustCompile(`/[^/]+-containers/[0-9a-f]{64}/userdata/?$`)
)

func TestBundles(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		bundle           string
		containerd, crio bool
	}{
		{"/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id, true, false},
		{"/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id + "/", true, false},
		{"/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id + "//", false, false},
		{"/run/containerd/io.containerd.runtime.v2.task/k8s.io", false, false},
		{"io.containerd.runtime.v2.task/k8s.io/x", false, false},
		{"/run/containers/storage/overlay-containers/" + id + "/userdata", false, true},
		{"/run/containers/storage/overlay-containers/" + id + "/userdata/", false, true},
		{"/run/containers/storage/-containers/" + id + "/userdata", false, false},
		{"/run/containers/storage/overlay-containers/" + strings.ToUpper(id) + "/userdata", false, false},
		{"/run/containers/storage/overlay-containers/" + id[:63] + "/userdata", false, false},
		{"", false, false},
	} {
		if got := containerdBundle(tc.bundle); got != tc.containerd {
			t.Errorf("containerdBundle(%q) = %v", tc.bundle, got)
		}
		if got := crioBundle(tc.bundle); got != tc.crio {
			t.Errorf("crioBundle(%q) = %v", tc.bundle, got)
		}
	}
}

// The checks say what the runtimes' bundle expressions say, whatever the path.
func FuzzBundles(f *testing.F) {
	id := strings.Repeat("0f", 32)
	for _, s := range []string{"/run/containerd/io.containerd.runtime.v2.task/k8s.io/x/", "/a/overlay-containers/" + id + "/userdata", "/b/-containers/" + id + "/userdata//", "/io.containerd.runtime.v2.task//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, bundle string) {
		if got, want := containerdBundle(bundle), containerdBundleRE.MatchString(bundle); got != want {
			t.Fatalf("containerdBundle(%q) = %v, the expression says %v", bundle, got, want)
		}
		if got, want := crioBundle(bundle), crioBundleRE.MatchString(bundle); got != want {
			t.Fatalf("crioBundle(%q) = %v, the expression says %v", bundle, got, want)
		}
	})
}
