package config

import "strings"

// InferQoS names a pod's QoS class from its cgroup parent as kubelet lays it
// out (cgroupfs "/kubepods/burstable/pod…" or systemd "kubepods-burstable-pod….slice"),
// falling back to kubelet's oom_score_adj for the class. "" when neither tells.
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
