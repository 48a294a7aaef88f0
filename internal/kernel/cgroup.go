package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Mode is the cgroup layout of a host.
type Mode int

const (
	ModeUnknown Mode = iota
	ModeV1           // legacy: one hierarchy per controller
	ModeHybrid       // v1 controllers plus an empty v2 hierarchy at /sys/fs/cgroup/unified
	ModeV2           // unified: one hierarchy with every controller
)

func (m Mode) String() string {
	switch m {
	case ModeV1:
		return "v1"
	case ModeHybrid:
		return "hybrid"
	case ModeV2:
		return "v2"
	}
	return "unknown"
}

// ErrUnsupported is returned for a cgroup file the host's layout does not have,
// such as memory.oom.group on a cgroup v1 memory controller.
var ErrUnsupported = errors.New("not supported on this cgroup layout")

// CgroupMount is where the cgroup hierarchies are mounted, relative to root.
const CgroupMount = "sys/fs/cgroup"

// DetectMode tells v1, v2 and hybrid hosts apart by the files the kernel
// puts at the top of each hierarchy.
func DetectMode(root string) Mode {
	base := filepath.Join(root, CgroupMount)
	if exists(filepath.Join(base, "cgroup.controllers")) {
		return ModeV2
	}
	if exists(filepath.Join(base, "unified", "cgroup.controllers")) {
		return ModeHybrid
	}
	if exists(filepath.Join(base, "memory")) {
		return ModeV1
	}
	return ModeUnknown
}

// MemoryCgroupDir is the directory of cgroup path cg (as in /proc/PID/cgroup)
// in the hierarchy that holds the memory controller.
func MemoryCgroupDir(root string, mode Mode, cg string) string {
	base := filepath.Join(root, CgroupMount)
	if mode == ModeV1 || mode == ModeHybrid {
		base = filepath.Join(base, "memory")
	}
	return filepath.Join(base, path.Clean("/"+cg))
}

// ProcCgroup returns the cgroup path of pid in the hierarchy that holds the
// memory controller: the "0::" line on v2, the "memory" line on v1 and hybrid.
func ProcCgroup(root string, mode Mode, pid int) (string, error) {
	p := procPath(root, pid, "cgroup")
	b, err := readFile(p, maxSmall)
	if err != nil {
		return "", err
	}
	cg, err := cgroupLine(string(b), mode)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return cg, nil
}

// cgroupLineBytes is cgroupLine on the file's bytes, allocating only the path.
func cgroupLineBytes(b []byte, mode Mode) (string, error) {
	if mode == ModeV2 {
		for len(b) > 0 {
			line := b
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				line, b = b[:i], b[i+1:]
			} else {
				b = nil
			}
			if bytes.HasPrefix(line, []byte("0::")) {
				return string(line[3:]), nil
			}
		}
		return "", errors.New("no unified (0::) entry")
	}
	return cgroupLine(string(b), mode)
}

// cgroupLine finds the path in the text of /proc/PID/cgroup: the "0::"
// line on v2, the memory controller's line on v1 and hybrid.
func cgroupLine(text string, mode Mode) (string, error) {
	for _, line := range strings.Split(text, "\n") {
		// hierarchy-ID:controller-list:cgroup-path; the path may itself hold ':'.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if mode == ModeV2 && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		if mode != ModeV2 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2], nil
		}
	}
	want := "memory controller"
	if mode == ModeV2 {
		want = "unified (0::)"
	}
	return "", fmt.Errorf("no %s entry", want)
}

// ResolveCgroupsPath turns an OCI linux.cgroupsPath into a cgroup path as in
// /proc/PID/cgroup. The systemd driver's "slice:prefix:name" form becomes
// "<expanded slice>/<prefix>-<name>.scope"; a cgroupfs path is used as is.
func ResolveCgroupsPath(cgroupsPath string) (string, error) {
	if cgroupsPath == "" {
		return "", errors.New("empty cgroupsPath")
	}
	if strings.HasPrefix(cgroupsPath, "/") {
		return path.Clean(cgroupsPath), nil
	}
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 {
		// A relative cgroupfs path is relative to the runtime's own cgroup; the
		// runtimes oomguard serves run from the root, so treat it as absolute.
		return path.Clean("/" + cgroupsPath), nil
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	if slice == "" {
		slice = "system.slice"
	}
	dir, err := ExpandSlice(slice)
	if err != nil {
		return "", err
	}
	unit := name
	if !strings.HasSuffix(name, ".slice") {
		unit = name + ".scope"
		if prefix != "" {
			unit = prefix + "-" + unit
		}
	}
	return path.Join(dir, unit), nil
}

// ExpandSlice maps a systemd slice name to its cgroup path, as systemd does:
// "a-b-c.slice" lives at "/a.slice/a-b.slice/a-b-c.slice".
func ExpandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || strings.Contains(slice, "/") {
		return "", fmt.Errorf("invalid slice name %q: want NAME.slice without '/'", slice)
	}
	if name == "-" {
		return "/", nil
	}
	if name == "" || strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("invalid slice name %q", slice)
	}
	var b strings.Builder
	prefix := ""
	for i, comp := range strings.Split(name, "-") {
		if i > 0 {
			prefix += "-"
		}
		prefix += comp
		b.WriteString("/" + prefix + ".slice")
	}
	return b.String(), nil
}

// ReadOOMGroup returns the memory.oom.group flag of cgroup cg.
func ReadOOMGroup(root string, mode Mode, cg string) (bool, error) {
	if mode != ModeV2 {
		return false, fmt.Errorf("memory.oom.group on cgroup %s host: %w", mode, ErrUnsupported)
	}
	v, err := readIntFile(filepath.Join(MemoryCgroupDir(root, mode, cg), "memory.oom.group"))
	if err != nil {
		return false, err
	}
	return v != 0, nil
}

// WriteOOMGroup sets memory.oom.group of cgroup cg.
func WriteOOMGroup(root string, mode Mode, cg string, on bool) error {
	if mode != ModeV2 {
		return fmt.Errorf("memory.oom.group on cgroup %s host: %w", mode, ErrUnsupported)
	}
	p := filepath.Join(MemoryCgroupDir(root, mode, cg), "memory.oom.group")
	v := GroupValue(on) + "\n"
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	_, werr := f.WriteString(v)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %s: %w", p, werr)
	}
	return cerr
}

// GroupValue is how memory.oom.group (and a unified resource) writes b: "0" or "1".
func GroupValue(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// EffectiveOOMGroup reports whether an OOM kill in cgroup cg takes the whole
// cgroup: the kernel kills the highest ancestor (cg included) whose
// memory.oom.group is 1. by is that cgroup's path, "" when none is set.
func EffectiveOOMGroup(root string, mode Mode, cg string) (on bool, by string, err error) {
	if mode != ModeV2 {
		return false, "", fmt.Errorf("memory.oom.group on cgroup %s host: %w", mode, ErrUnsupported)
	}
	cg = path.Clean("/" + cg)
	if !exists(MemoryCgroupDir(root, mode, cg)) {
		return false, "", fmt.Errorf("cgroup %s: %w", cg, os.ErrNotExist)
	}
	for c := cg; c != "/"; c = path.Dir(c) {
		set, rerr := ReadOOMGroup(root, mode, c)
		if rerr != nil {
			if errors.Is(rerr, os.ErrNotExist) {
				continue // the memory controller is not enabled at this level
			}
			return false, "", rerr
		}
		if set {
			on, by = true, c
		}
	}
	return on, by, nil
}

// CgroupPids lists the processes in cgroup cg and every cgroup below it.
func CgroupPids(root string, mode Mode, cg string) ([]int, error) {
	dir := MemoryCgroupDir(root, mode, cg)
	var pids []int
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, os.ErrNotExist) {
				return nil // a child cgroup removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := readFile(filepath.Join(p, "cgroup.procs"), maxTable)
		if err != nil {
			if p != dir && errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list pids of cgroup %s: %w", cg, err)
	}
	return pids, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ReadMemoryEvents returns the counters of memory.events of cgroup cg
// (oom, oom_kill, oom_group_kill, …) on cgroup v2.
func ReadMemoryEvents(root string, mode Mode, cg string) (map[string]uint64, error) {
	if mode != ModeV2 {
		return nil, fmt.Errorf("memory.events on cgroup %s host: %w", mode, ErrUnsupported)
	}
	b, err := readFile(filepath.Join(MemoryCgroupDir(root, mode, cg), "memory.events"), maxSmall)
	if err != nil {
		return nil, err
	}
	ev := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			ev[k] = n
		}
	}
	return ev, nil
}
