package enforce

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/policy"
)

// ErrNotContained is a cgroup or a process that is not one container's own.
var ErrNotContained = errors.New("not one container's cgroup")

// Container is one container's own cgroup, as Contain checked it: every
// write oomguard makes goes through it, to that cgroup and to the processes
// in it, never to an ancestor or a sibling.
type Container struct {
	root    string
	mode    kernel.Mode
	cgroup  string // as /proc/PID/cgroup shows it in the host's cgroup namespace
	nsDepth int    // how deep the reader's cgroup namespace is, for pids' paths
}

// Contain checks that cg (a path as in /proc/PID/cgroup on the host) is one
// container's own: below a kubelet pod's cgroup (kubepods…/pod<uid>/<container>),
// or a child of one of parents (podman's, plain runc's). The root, kubepods,
// a pod's cgroup and anything that is not a container's are refused.
func Contain(root string, mode kernel.Mode, cg string, parents []string) (*Container, error) {
	if cg == "" || !path.IsAbs(cg) || path.Clean(cg) != cg {
		return nil, fmt.Errorf("cgroup %q: %w: want an absolute, clean path", cg, ErrNotContained)
	}
	_, _, _, kube := policy.KubeContainer(cg)
	if !kube && !slices.ContainsFunc(parents, func(p string) bool { return p != "/" && strings.HasPrefix(cg, p+"/") }) {
		return nil, fmt.Errorf("cgroup %s: %w: it is neither below a pod's cgroup (kubepods…/pod<uid>) nor below containment.cgroup_parents %q", cg, ErrNotContained, parents)
	}
	return &Container{root: root, mode: mode, cgroup: cg, nsDepth: kernel.CgroupNSDepth(root, mode)}, nil
}

// Cgroup is the container's cgroup.
func (c *Container) Cgroup() string { return c.cgroup }

// open opens pid's /proc directory if the process is in the container's
// cgroup or below it, so that what follows reaches that process only.
func (c *Container) open(pid int) (*kernel.ProcDir, error) {
	d, err := kernel.OpenProc(c.root, pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	seen, err := d.Cgroup(c.mode)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("read the cgroup of pid %d: %w", pid, err)
	}
	if !within(c.hostPath(seen), c.cgroup) {
		d.Close()
		return nil, fmt.Errorf("pid %d is not in the container's cgroup %s but in %s: %w", pid, c.cgroup, seen, ErrNotContained)
	}
	return d, nil
}

// Holds checks that pid is in the container's cgroup or below it.
func (c *Container) Holds(pid int) error {
	d, err := c.open(pid)
	if err != nil {
		return err
	}
	return d.Close()
}

// hostPath maps a cgroup path as the reader's cgroup namespace shows it
// ("/../../podZ/ctrW" from inside a pod) to the host's, given that the
// container's own path shares the ancestor the ".." climb to. A path inside
// the reader's own namespace (no "..") is not any pod's: "".
func (c *Container) hostPath(seen string) string {
	if c.nsDepth == 0 {
		return seen
	}
	parts := strings.Split(strings.TrimPrefix(seen, "/"), "/")
	up := 0
	for up < len(parts) && parts[up] == ".." {
		up++
	}
	ancestor := c.nsDepth - up
	own := strings.Split(strings.TrimPrefix(c.cgroup, "/"), "/")
	if up == 0 || ancestor < 0 || ancestor > len(own) {
		return ""
	}
	return "/" + path.Join(append(slices.Clone(own[:ancestor]), parts[up:]...)...)
}

func within(cg, dir string) bool {
	return cg == dir || strings.HasPrefix(cg, dir+"/")
}

// Score sets pid's oom_score_adj to want unless it has it, and returns the
// value it found; pid must be in the container.
func (c *Container) Score(pid, want int) (old int, changed bool, err error) {
	d, err := c.open(pid)
	if err != nil {
		return 0, false, err
	}
	defer d.Close()
	if old, err = d.OOMScoreAdj(); err != nil {
		return 0, false, fmt.Errorf("read oom_score_adj of pid %d: %w", pid, err)
	}
	if old == want {
		return old, false, nil
	}
	if err := d.SetOOMScoreAdj(want); err != nil {
		return old, false, fmt.Errorf("set oom_score_adj of pid %d: %w", pid, err)
	}
	return old, true, nil
}

// Scores sets every process in the container's cgroup and below it to want,
// and returns how many it changed. Processes that exit meanwhile are not errors.
func (c *Container) Scores(want int) (changed int, errs []error) {
	pids, err := kernel.CgroupPids(c.root, c.mode, c.cgroup)
	if err != nil {
		if kernel.IsGone(err) {
			return 0, nil
		}
		return 0, []error{err}
	}
	for _, pid := range pids {
		_, ok, err := c.Score(pid, want)
		if err != nil && !kernel.IsGone(err) {
			errs = append(errs, err)
		}
		if ok {
			changed++
		}
	}
	return changed, errs
}

// Group sets the container cgroup's memory.oom.group to want unless it has
// it, and returns the value it found. Hosts whose memory controller is on
// cgroup v1 have no such file: the error wraps kernel.ErrUnsupported.
func (c *Container) Group(want bool) (old, changed bool, err error) {
	return group(c.root, c.mode, c.cgroup, want)
}
