package policy

import (
	"strings"

	"github.com/oomguard/oomguard/config"
)

// QoS classes as kubelet names them, lower-cased.
const (
	QoSGuaranteed = config.QoSGuaranteed
	QoSBurstable  = config.QoSBurstable
	QoSBestEffort = config.QoSBestEffort
)

// kubelet's cgroups: kubepods (the root of every pod), an optional QoS
// level, one cgroup per pod, one per container, named by either driver:
// cgroupfs "/kubepods/burstable/pod<uid>/<id>", systemd
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope".
var ctrPrefixes = []string{"cri-containerd-", "crio-conmon-", "crio-", "docker-", "libpod-", "containerd-"}

// podUID is the pod's UID in a pod cgroup's name: "pod<uid>" or
// "…-pod<uid>.slice", the UID as kubelet writes it (a UUID, with '_' for
// '-' under systemd, or lower-case letters and digits). It is the regexp
// `(?:^|-)pod(UUID|[0-9a-z]+)(\.slice)?$` written out, which the hook would
// otherwise compile at every container's creation (a test holds them equal).
func podUID(name string) (string, bool) {
	s := strings.TrimSuffix(name, ".slice")
	for i := 0; i+3 <= len(s); i++ {
		if s[i:i+3] != "pod" || (i > 0 && s[i-1] != '-') {
			continue
		}
		if uid := s[i+3:]; isUUID(uid) || isLowerAlnum(uid) {
			return uid, true
		}
	}
	return "", false
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' && c != '_' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

func isLowerAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return s != ""
}

// KubeContainer splits a cgroup path as kubelet and the runtimes lay it out
// into its pod and container cgroups:
// "/kubepods/burstable/pod1/abc/init.scope" → pod "1", container cgroup
// "/kubepods/burstable/pod1/abc", id "abc".
func KubeContainer(cg string) (pod, ctrCgroup, id string, ok bool) {
	if !strings.Contains(cg, "kubepods") {
		return "", "", "", false
	}
	parts := strings.Split(strings.Trim(cg, "/"), "/")
	below := false // below kubelet's kubepods cgroup
	for i, p := range parts {
		uid, ok := podUID(p)
		if !ok || !below || i+1 >= len(parts) {
			below = below || p == "kubepods" || p == "kubepods.slice" || strings.HasPrefix(p, "kubepods-") || strings.Contains(p, "-kubepods")
			continue
		}
		pod = strings.ReplaceAll(uid, "_", "-")
		id = parts[i+1]
		for _, pre := range ctrPrefixes {
			id = strings.TrimPrefix(id, pre)
		}
		id = strings.TrimSuffix(id, ".scope")
		return pod, "/" + strings.Join(parts[:i+2], "/"), id, true
	}
	return "", "", "", false
}

// InferQoS names a pod's QoS class from its cgroup parent as kubelet lays it
// out, falling back to kubelet's oom_score_adj for the class. "" when
// neither tells.
func InferQoS(cgroupPath string, oomScoreAdj *int) string {
	if i := strings.Index(cgroupPath, "kubepods"); i >= 0 {
		rest := cgroupPath[i+len("kubepods"):]
		switch {
		case strings.HasPrefix(rest, "/burstable") || strings.HasPrefix(rest, "-burstable") || strings.HasPrefix(rest, ".slice/kubepods-burstable"):
			return QoSBurstable
		case strings.HasPrefix(rest, "/besteffort") || strings.HasPrefix(rest, "-besteffort") || strings.HasPrefix(rest, ".slice/kubepods-besteffort"):
			return QoSBestEffort
		case strings.Contains(rest, "pod"):
			return QoSGuaranteed
		}
	}
	if oomScoreAdj != nil {
		switch v := *oomScoreAdj; {
		case v == -997:
			return QoSGuaranteed
		case v == 1000:
			return QoSBestEffort
		case v >= 3 && v <= 999: // kubelet clamps Burstable to 3..999
			return QoSBurstable
		}
	}
	return ""
}
