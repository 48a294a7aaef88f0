package nriplugin

import (
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"
)

// A process's container is found from the root of its cgroup path down:
// the first cgroup that is a known container's own. A pod names and nests
// the cgroups below its container at will (another container's ID,
// "cri-containerd-<id>.scope"), so nothing below the container's own
// cgroup can make a process another container's.

// indexLocked records the known container's own cgroup, as its spec names it.
func (p *Plugin) indexLocked(id string, info ctrInfo) {
	if cg, err := kernel.ResolveCgroupsPath(info.cgroupsPath); err == nil && info.cgroupsPath != "" {
		p.byCgroup[cg] = id
	}
}

// unindexLocked forgets the container's cgroup.
func (p *Plugin) unindexLocked(id string, info ctrInfo) {
	if cg, err := kernel.ResolveCgroupsPath(info.cgroupsPath); err == nil && p.byCgroup[cg] == id {
		delete(p.byCgroup, cg)
	}
}

// reindexLocked indexes every known container anew.
func (p *Plugin) reindexLocked() {
	clear(p.byCgroup)
	for id, info := range p.known {
		p.indexLocked(id, info)
	}
}

// idAtLocked is the known container whose cgroup holds cg (a cgroup as
// /proc/PID/cgroup shows it): the shallowest of cg's ancestors (or cg)
// that is a container's own cgroup, by its path when cg is the host's, else
// by the first element from the root that names a known container, as
// kubelet's and the runtimes' cgroup names end in the container's ID
// ("ID", "cri-containerd-ID.scope", "crio-ID.scope"). "" for none.
func (p *Plugin) idAtLocked(cg string) string {
	if !strings.HasPrefix(cg, "/..") {
		for i := 1; i <= len(cg); i++ {
			if i < len(cg) && cg[i] != '/' {
				continue
			}
			if id, ok := p.byCgroup[cg[:i]]; ok {
				return id
			}
		}
	}
	for elem := range strings.SplitSeq(strings.Trim(cg, "/"), "/") {
		if id := trimRuntime(elem); id != "" && id != ".." {
			if _, ok := p.known[id]; ok {
				return id
			}
		}
	}
	return ""
}

func trimRuntime(base string) string {
	base = strings.TrimSuffix(base, ".scope")
	for _, pre := range []string{"cri-containerd-", "crio-", "docker-", "libpod-"} {
		base = strings.TrimPrefix(base, pre)
	}
	return base
}
