package enforce

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/policy"
)

// ErrNotContained is a cgroup or a process that is not one container's own.
var ErrNotContained = errors.New("not one container's cgroup")

// Container is one container's own cgroup, as Locate checked it: every
// write oomguard makes goes through it, to that cgroup and to the processes
// in it, never to an ancestor or a sibling.
type Container struct {
	n      *Node
	cgroup string // as /proc/PID/cgroup shows it in the host's cgroup namespace
}

// Locate finds a container's own cgroup: the one its runtime spec names
// (cgroupsPath, in either driver's form), else the cgroup of its process
// pid, which is only known when this cgroup namespace shows host paths.
// The cgroup must be one container's own (see Contain).
func (n *Node) Locate(cgroupsPath string, pid int) (*Container, error) {
	var cg string
	var err error
	switch {
	case cgroupsPath != "":
		cg, err = kernel.ResolveCgroupsPath(cgroupsPath)
	case pid <= 0:
		return nil, errors.New("no cgroupsPath and no pid: cannot tell the container's cgroup")
	case n.nsDepth == 0:
		if cg, err = kernel.ProcCgroup(n.root, n.mode, pid); err == nil {
			cg = n.own(cg)
		}
	default:
		return nil, fmt.Errorf("no cgroupsPath, and pid %d's cgroup is not shown as the host's in this cgroup namespace", pid)
	}
	if err != nil {
		return nil, fmt.Errorf("find the cgroup of the container: %w", err)
	}
	return n.Contain(cg)
}

// Cgroup is pid's cgroup as this cgroup namespace shows it.
func (n *Node) Cgroup(pid int) (string, error) { return kernel.ProcCgroup(n.root, n.mode, pid) }

// FirstVictim is the process a global OOM would kill now (kernel.FirstVictim).
func (n *Node) FirstVictim(skip int) (kernel.Process, int64, bool, error) {
	return kernel.FirstVictim(n.root, n.mode, skip)
}

// TotalPages is the kernel's totalpages for a global OOM.
func (n *Node) TotalPages() (int64, error) {
	m, err := kernel.ReadMeminfo(n.root)
	return m.TotalPages(), err
}

// own is the container cgroup a process's cgroup is in or below: a systemd
// in a container moves itself into a child (init.scope), and the container
// is the whole.
func (n *Node) own(cg string) string {
	if _, ctr, _, ok := policy.KubeContainer(cg); ok {
		return ctr
	}
	for _, p := range n.parents {
		if rest, ok := strings.CutPrefix(cg, p+"/"); ok && p != "/" {
			first, _, _ := strings.Cut(rest, "/")
			return p + "/" + first
		}
	}
	return cg
}

// Contain checks that cg (a path as in /proc/PID/cgroup on the host) is one
// container's own: below a kubelet pod's cgroup (kubepods…/pod<uid>/<container>),
// or a child of one of the node's containment parents (podman's, plain
// runc's). The root, kubepods, a pod's cgroup and anything that is not a
// container's are refused.
func (n *Node) Contain(cg string) (*Container, error) {
	if cg == "" || !path.IsAbs(cg) || path.Clean(cg) != cg {
		return nil, fmt.Errorf("cgroup %q: %w: want an absolute, clean path", cg, ErrNotContained)
	}
	_, _, _, kube := policy.KubeContainer(cg)
	if !kube && !slices.ContainsFunc(n.parents, func(p string) bool { return p != "/" && strings.HasPrefix(cg, p+"/") }) {
		return nil, fmt.Errorf("cgroup %s: %w: it is neither below a pod's cgroup (kubepods…/pod<uid>) nor below containment.cgroup_parents %q", cg, ErrNotContained, n.parents)
	}
	return &Container{n: n, cgroup: cg}, nil
}

// Cgroup is the container's cgroup.
func (c *Container) Cgroup() string { return c.cgroup }

// open opens pid's /proc directory if the process is in the container's
// cgroup or below it, so that what follows reaches that process only.
func (c *Container) open(pid int) (*kernel.ProcDir, error) {
	d, err := kernel.OpenProc(c.n.root, pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	if err := c.check(d, pid); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// check checks that the held process is in the container's cgroup or below it.
func (c *Container) check(d *kernel.ProcDir, pid int) error {
	seen, err := d.Cgroup(c.n.mode)
	if err != nil {
		return fmt.Errorf("read the cgroup of pid %d: %w", pid, err)
	}
	if !within(c.hostPath(seen), c.cgroup) {
		return fmt.Errorf("pid %d is not in the container's cgroup %s but in %s: %w", pid, c.cgroup, seen, ErrNotContained)
	}
	return nil
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
	depth := c.n.nsDepth
	if depth == 0 {
		return seen
	}
	parts := strings.Split(strings.TrimPrefix(seen, "/"), "/")
	up := 0
	for up < len(parts) && parts[up] == ".." {
		up++
	}
	ancestor := depth - up
	own := strings.Split(strings.TrimPrefix(c.cgroup, "/"), "/")
	if up == 0 || ancestor < 0 || ancestor > len(own) {
		return ""
	}
	return "/" + path.Join(append(slices.Clone(own[:ancestor]), parts[up:]...)...)
}

func within(cg, dir string) bool {
	return cg == dir || strings.HasPrefix(cg, dir+"/")
}

// Score sets pid's oom_score_adj to want unless it has it; pid must be in
// the container.
func (c *Container) Score(pid, want int) Change {
	ch := Change{Setting: SettingScore, To: itoa(want)}
	d, err := c.open(pid)
	if err != nil {
		ch.What, ch.Err = Failed, err
		if errors.Is(err, ErrNotContained) {
			ch.What = Refused
		}
		return ch
	}
	defer d.Close()
	return setScore(d, pid, want, ch, nil)
}

// setScore sets the held process's oom_score_adj to want unless it has it;
// mayWrite, when not nil, says before the write whether it may be written
// to (an error wrapping ErrNotContained: Refused).
func setScore(d *kernel.ProcDir, pid, want int, ch Change, mayWrite func() error) Change {
	old, err := d.OOMScoreAdj()
	if err != nil {
		ch.What, ch.Err = Failed, fmt.Errorf("read oom_score_adj of pid %d: %w", pid, err)
		return ch
	}
	ch.From = itoa(old)
	if old == want {
		ch.What = Unchanged
		return ch
	}
	if mayWrite != nil {
		if err := mayWrite(); err != nil {
			ch.What, ch.Err = Failed, err
			if errors.Is(err, ErrNotContained) {
				ch.What = Refused
			}
			return ch
		}
	}
	if err := d.SetOOMScoreAdj(want); err != nil {
		ch.What, ch.Err = Failed, fmt.Errorf("set oom_score_adj of pid %d: %w", pid, err)
		return ch
	}
	ch.What = Changed
	return ch
}

// Scores sets every process in the container's cgroup and below it to want,
// and returns how many it changed. A process that exits or leaves the cgroup
// meanwhile (an exiting one shows the root cgroup; its pid may be another's)
// is gone, not an error: nothing was written to it. A part of the tree it
// cannot read is left out alone, as a *kernel.UnreadError among errs.
func (c *Container) Scores(want int) (changed int, errs []error) {
	r := c.SetScores(want, true)
	return r.Changed, r.Errs
}

// ScoreReport is a pass over a container's processes' scores.
type ScoreReport struct {
	Changed int    // written to want
	Differ  int    // found with another score, written or not
	Found   string // the first other score found
	Errs    []error
}

// SetScores is Scores saying what it found; with write false it only
// reads, and changes nothing.
func (c *Container) SetScores(want int, write bool) ScoreReport {
	var r ScoreReport
	differ := func(from string) {
		if r.Differ++; r.Differ == 1 {
			r.Found = from
		}
	}
	err := kernel.WalkCgroup(c.n.root, c.n.mode, c.cgroup, func(d *kernel.CgroupDir) error {
		pids, err := d.Procs()
		if err != nil {
			return err
		}
		for _, pid := range pids {
			if !write {
				if v, err := kernel.ReadOOMScoreAdj(c.n.root, pid); err == nil && v != want {
					differ(itoa(v))
				}
				continue
			}
			ch := c.scoreIn(d, pid, want)
			if ch.Err != nil && ch.What != Refused && !kernel.IsGone(ch.Err) {
				r.Errs = append(r.Errs, ch.Err)
			}
			if ch.What == Changed {
				r.Changed++
				differ(ch.From)
			}
		}
		return nil
	})
	if err != nil && !kernel.IsGone(err) {
		r.Errs = append(r.Errs, err)
	}
	return r
}

// scoreIn is Score for a pid the walk found in d, its score read first:
// a process that has want is left as it is, nothing written to it, without
// reading where it runs (a verification then reads one file a process, not
// two). One to write to is checked as Score checks it; one whose
// /proc/PID/cgroup the kernel cannot print (its cgroup's path is past
// PATH_MAX) against d's own list instead, its /proc directory held.
func (c *Container) scoreIn(d *kernel.CgroupDir, pid, want int) Change {
	ch := Change{Setting: SettingScore, To: itoa(want)}
	p, err := kernel.OpenProc(c.n.root, pid)
	if err != nil {
		ch.What, ch.Err = Failed, fmt.Errorf("pid %d: %w", pid, err)
		return ch
	}
	defer p.Close()
	return setScore(p, pid, want, ch, func() error {
		err := c.check(p, pid)
		if errors.Is(err, syscall.ENAMETOOLONG) && d.Has(pid) {
			return nil
		}
		if errors.Is(err, syscall.ENAMETOOLONG) {
			return fmt.Errorf("pid %d: %w", pid, os.ErrNotExist) // left the cgroup, or exited
		}
		return err
	})
}

// Group sets the container cgroup's memory.oom.group to want unless it has it.
func (c *Container) Group(want bool) Change {
	ch := Change{Setting: SettingGroup, To: kernel.GroupValue(want)}
	old, err := kernel.ReadOOMGroup(c.n.root, c.n.mode, c.cgroup)
	if err != nil {
		ch.What, ch.Err = Failed, fmt.Errorf("read memory.oom.group of %s: %w", c.cgroup, err)
		if errors.Is(err, kernel.ErrUnsupported) {
			ch.What, ch.Why = Unsupported, unsupported(c.n.mode)
		}
		return ch
	}
	ch.From = kernel.GroupValue(old)
	if old == want {
		ch.What = Unchanged
		return ch
	}
	if err := kernel.WriteOOMGroup(c.n.root, c.n.mode, c.cgroup, want); err != nil {
		ch.What, ch.Err = Failed, fmt.Errorf("set memory.oom.group of %s: %w", c.cgroup, err)
		return ch
	}
	ch.What = Changed
	return ch
}

// MemoryEvents are the counters of the container cgroup's memory.events
// (oom, oom_kill, oom_group_kill, …) on cgroup v2.
func (c *Container) MemoryEvents() (map[string]uint64, error) {
	return kernel.MemoryEvents(c.n.root, c.n.mode, c.cgroup)
}

// OOMKills is how many processes the OOM killer killed in the container
// (kernel.OOMKills).
func (c *Container) OOMKills() (uint64, error) { return kernel.OOMKills(c.n.root, c.n.mode, c.cgroup) }

// OOMKillsByCgroup is each cgroup's count in the container's tree on
// cgroup v1, its one count on v2 (kernel.OOMKillsByCgroup).
func (c *Container) OOMKillsByCgroup() ([]kernel.CgroupKills, error) {
	return kernel.OOMKillsByCgroup(c.n.root, c.n.mode, c.cgroup)
}

// IsGone reports whether err means the container or process no longer exists.
func IsGone(err error) bool { return kernel.IsGone(err) }

// Largest are the container's n processes holding the most memory (what
// the OOM killer counts), largest first: the task list the kernel prints
// with vm.oom_dump_tasks, for one container, read after the fact.
func (c *Container) Largest(n int) ([]kernel.Process, error) {
	pids, err := kernel.CgroupPids(c.n.root, c.n.mode, c.cgroup)
	var unread *kernel.UnreadError
	if err != nil && !errors.As(err, &unread) {
		return nil, err
	}
	r := kernel.NewProcReader(c.n.root, c.n.mode)
	var out []kernel.Process
	for _, pid := range pids[:min(len(pids), maxLargestScan)] {
		p, err := r.Read(pid)
		if err != nil || p.Kernel {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b kernel.Process) int { return cmp.Compare(b.MemKB, a.MemKB) })
	return out[:min(len(out), n)], nil
}

// maxLargestScan bounds the processes Largest reads: a container may hold
// thousands, and the read runs at every OOM kill.
const maxLargestScan = 4096

// WatchKills has w tell when the container's OOM-kill count changes
// (memory.events, cgroup v2 only).
func (c *Container) WatchKills(w *kernel.Watch) (int32, error) {
	return w.AddMemoryEvents(c.n.root, c.n.mode, c.cgroup)
}

// ID is the container cgroup's id (cgroup v2 only).
func (c *Container) ID() (uint64, error) { return kernel.CgroupID(c.n.root, c.n.mode, c.cgroup) }

// SetScore writes want to pid's oom_score_adj without reading it first:
// from is what the runtime set it to (a container's init as it starts),
// reported as its old value; equal to want, nothing is written. pid must
// still be in the container.
func (c *Container) SetScore(pid, want, from int) Change {
	ch := Change{Setting: SettingScore, From: itoa(from), To: itoa(want), What: Unchanged}
	if from == want {
		return ch
	}
	// By path, not through /proc/PID's directory: the init, held by its
	// runtime until it starts, cannot give its pid to another process.
	seen, err := kernel.ProcCgroup(c.n.root, c.n.mode, pid)
	if err == nil && !within(c.hostPath(seen), c.cgroup) {
		ch.What, ch.Err = Refused, fmt.Errorf("pid %d is not in the container's cgroup %s but in %s: %w", pid, c.cgroup, seen, ErrNotContained)
		return ch
	}
	if err == nil {
		err = kernel.WriteScore(c.n.root, pid, want)
	}
	if err != nil {
		ch.What, ch.Err = Failed, fmt.Errorf("set oom_score_adj of pid %d: %w", pid, err)
		return ch
	}
	ch.What = Changed
	return ch
}

// SetGroup writes memory.oom.group without reading it first: from is what
// the runtime set it to as it made the cgroup; equal to want, nothing is
// written.
func (c *Container) SetGroup(want, from bool) Change {
	ch := Change{Setting: SettingGroup, From: kernel.GroupValue(from), To: kernel.GroupValue(want), What: Unchanged}
	if from == want {
		return ch
	}
	if err := kernel.WriteOOMGroup(c.n.root, c.n.mode, c.cgroup, want); err != nil {
		ch.What, ch.Err = Failed, fmt.Errorf("set memory.oom.group of %s: %w", c.cgroup, err)
		if errors.Is(err, kernel.ErrUnsupported) {
			ch.What, ch.Why = Unsupported, unsupported(c.n.mode)
		}
		return ch
	}
	ch.What = Changed
	return ch
}
