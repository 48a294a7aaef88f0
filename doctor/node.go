package doctor

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cri"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/policy"
)

// node is one snapshot of a node's processes, read once for every check.
type node struct {
	root   string
	mode   kernel.Mode
	procs  []kernel.Process
	byPid  map[int]*kernel.Process
	cfg    *config.Config
	sample time.Duration
	// ctrs caches containerOf by cgroup path: a container's processes share one.
	ctrs map[string]ctrRef
	mem  kernel.Meminfo
	// memErr is why mem is unknown.
	memErr error
	// names are the CRI runtime's names of containers, by ID.
	names map[string]cri.Name
	// endpoint is the CRI runtime that named them, "" when none did.
	endpoint string
}

// ctrRef is where a cgroup path puts a process: its pod and container.
type ctrRef struct {
	pod, cgroup, id string
	ok              bool
}

// containerOf is policy.KubeContainer for a process, cached.
func (n *node) containerOf(p *kernel.Process) (pod, ctrCgroup, id string, ok bool) {
	r, hit := n.ctrs[p.Cgroup]
	if !hit {
		r.pod, r.cgroup, r.id, r.ok = policy.KubeContainer(p.Cgroup)
		n.ctrs[p.Cgroup] = r
	}
	return r.pod, r.cgroup, r.id, r.ok
}

func loadNode(root string, cfg *config.Config, sample time.Duration) (*node, error) {
	n := &node{root: root, mode: kernel.DetectMode(root), cfg: cfg, sample: sample, byPid: map[int]*kernel.Process{}, ctrs: map[string]ctrRef{}}
	pids, err := kernel.ListPids(root)
	if err != nil {
		return nil, fmt.Errorf("list processes in %s: %w", path.Join(root, "proc"), err)
	}
	// Read in parallel: a node has tens of thousands of processes.
	procs := make([]kernel.Process, len(pids))
	ok := make([]bool, len(pids))
	var wg sync.WaitGroup
	const workers = 4
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kernel.NewProcReader(root, n.mode)
			for i := w; i < len(pids); i += workers {
				p, err := r.Read(pids[i])
				procs[i], ok[i] = p, err == nil // a process that exited meanwhile is skipped
			}
		}()
	}
	wg.Wait()
	for i := range procs {
		if ok[i] {
			n.procs = append(n.procs, procs[i])
		}
	}
	n.mem, n.memErr = kernel.ReadMeminfo(root)
	total := n.mem.TotalPages()
	for i := range n.procs {
		p := &n.procs[i]
		n.byPid[p.Pid] = p
		if !p.Kernel {
			p.OOMScore = oomScore(kernel.Badness(p.MemKB, p.OOMScoreAdj, total), total)
		}
	}
	return n, nil
}

func short(id string) string { return id[:min(len(id), 12)] }

// ctrDesc names a container for a report: namespace/pod/container when the
// runtime said, with the pod's UID and the container's ID beside.
func (n *node) ctrDesc(pod, id string) string {
	if name, ok := n.names[id]; ok {
		return fmt.Sprintf("%s (pod %s container %s)", name, pod, short(id))
	}
	return fmt.Sprintf("pod %s container %s", pod, short(id))
}

// nameContainers asks the node's CRI runtime for its containers' names; the
// finding says where from, or why not. No runtime: no finding.
func (n *node) nameContainers(endpoint string) (Finding, bool) {
	if endpoint == "none" {
		return Finding{}, false
	}
	ep := cri.Find(n.root, endpoint)
	if ep == "" {
		return Finding{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := Finding{Check: "runtime", Severity: Info}
	names, err := cri.Names(ctx, n.root, ep)
	if err != nil {
		f.Summary = fmt.Sprintf("containers named by their IDs only: %v", err)
		return f, true
	}
	n.names, n.endpoint = names, ep
	f.Summary = fmt.Sprintf("%d containers named by the runtime at %s", len(names), ep)
	return f, true
}

func (n *node) name(p *kernel.Process) string {
	if len(p.Cmdline) > 0 {
		return path.Base(p.Cmdline[0])
	}
	return p.Comm
}

func (n *node) isDaemon(p *kernel.Process) bool {
	if _, _, _, inPod := n.containerOf(p); inPod {
		return false
	}
	for _, d := range n.cfg.Doctor.Daemons {
		if p.Comm == kernel.TaskComm(d) || n.name(p) == d {
			return true
		}
	}
	return false
}

func (n *node) killable(p *kernel.Process) bool {
	return kernel.Killable(p)
}
