package kernel

import (
	"regexp"
	"strings"
)

// Container identity from a cgroup path, as kubelet and the runtimes lay it out.
var (
	podRE       = regexp.MustCompile(`(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-z]+)(\.slice)?$`)
	ctrPrefixes = []string{"cri-containerd-", "crio-conmon-", "crio-", "docker-", "libpod-", "containerd-"}
)

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
		m := podRE.FindStringSubmatch(p)
		if m == nil || !below || i+1 >= len(parts) {
			below = below || p == "kubepods" || p == "kubepods.slice" || strings.HasPrefix(p, "kubepods-") || strings.Contains(p, "-kubepods")
			continue
		}
		pod = strings.ReplaceAll(m[1], "_", "-")
		id = parts[i+1]
		for _, pre := range ctrPrefixes {
			id = strings.TrimPrefix(id, pre)
		}
		id = strings.TrimSuffix(id, ".scope")
		return pod, "/" + strings.Join(parts[:i+2], "/"), id, true
	}
	return "", "", "", false
}
