package policy

import (
	"regexp"
	"testing"
)

func TestKubeContainer(t *testing.T) {
	for _, tc := range []struct {
		cg, pod, ctr, id string
	}{
		{"/kubepods/burstable/pod1/abc", "1", "/kubepods/burstable/pod1/abc", "abc"},
		{"/kubepods/burstable/pod1/abc/init.scope", "1", "/kubepods/burstable/pod1/abc", "abc"},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_1111_2222_3333_444455556666.slice/cri-containerd-f00.scope",
			"0a1b2c3d-1111-2222-3333-444455556666", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_1111_2222_3333_444455556666.slice/cri-containerd-f00.scope", "f00"},
		{"/kubepods.slice/kubepods-pod9.slice/crio-abc.scope", "9", "/kubepods.slice/kubepods-pod9.slice/crio-abc.scope", "abc"},
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod9.slice/crio-abc.scope", "9", "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod9.slice/crio-abc.scope", "abc"},
		{"/kubepods/pod1", "", "", ""},         // a pod's own cgroup
		{"/kubepods/burstable", "", "", ""},    // a QoS level
		{"/system.slice/pod1/abc", "", "", ""}, // not below kubepods
		{"/pod1/kubepods/x", "", "", ""},       // the pod level comes before kubepods
		{"/", "", "", ""},
	} {
		pod, ctr, id, ok := KubeContainer(tc.cg)
		if ok != (tc.pod != "") || pod != tc.pod || ctr != tc.ctr || id != tc.id {
			t.Errorf("KubeContainer(%q) = %q %q %q %v; want %q %q %q", tc.cg, pod, ctr, id, ok, tc.pod, tc.ctr, tc.id)
		}
	}
}

// podUID is the regexp it replaces, written out: the same on every name.
var podRE = regexp.MustCompile(`(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-z]+)(\.slice)?$`)

func FuzzPodUID(f *testing.F) {
	for _, s := range []string{"pod1", "kubepods-burstable-pod1f2e.slice", "kubepods-pod0a1b2c3d_1111_2222_3333_444455556666.slice",
		"pod0a1b2c3d-1111-2222-3333-444455556666", "podpod1", "xpod1", "a-pod-b", "pod", "pod.slice", "poda.slice.slice", "-pod1.slice", "pod1-pod2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		uid, ok := podUID(s)
		m := podRE.FindStringSubmatch(s)
		if ok != (m != nil) || (ok && uid != m[1]) {
			t.Fatalf("podUID(%q) = %q, %v; the regexp says %q", s, uid, ok, m)
		}
	})
}
