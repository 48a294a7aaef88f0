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
// puts at the top of each hierarchy. (opencontainers/cgroups asks statfs of
// /sys/fs/cgroup itself, once per process; oomguard must read a tree too.)
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

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
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
	p := filepath.Join(root, "proc", strconv.Itoa(pid), "cgroup")
	b, err := ReadFile(p, MaxSmall)
	if err != nil {
		return "", err
	}
	cg, err := CgroupPath(b, mode)
	if err != nil {
		return "", &ParseError{Path: p, Err: err}
	}
	return cg, nil
}

// CgroupPath finds the path in the text of /proc/PID/cgroup
// ("hierarchy-ID:controller-list:cgroup-path" a line, the path itself may
// hold ':'): the "0::" line on v2, the memory controller's line on v1 and
// hybrid. It allocates only the path.
func CgroupPath(b []byte, mode Mode) (string, error) {
	for line := range bytes.Lines(b) {
		id, rest, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte(":"))
		if !ok {
			continue
		}
		controllers, cg, ok := bytes.Cut(rest, []byte(":"))
		if !ok {
			continue
		}
		if mode == ModeV2 {
			if string(id) == "0" && len(controllers) == 0 {
				return string(cg), nil
			}
			continue
		}
		for c := range bytes.SplitSeq(controllers, []byte(",")) {
			if string(c) == "memory" {
				return string(cg), nil
			}
		}
	}
	if mode == ModeV2 {
		return "", errors.New("no unified (0::) entry")
	}
	return "", errors.New("no memory controller entry")
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
// "a-b-c.slice" lives at "/a.slice/a-b.slice/a-b-c.slice". It is
// opencontainers/cgroups' systemd.ExpandSlice (a test holds them equal),
// written here because that package links D-Bus and eBPF into the hook.
func ExpandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || strings.Contains(slice, "/") {
		return "", fmt.Errorf("invalid slice name %q: want NAME.slice without '/'", slice)
	}
	if name == "-" {
		return "/", nil
	}
	var b strings.Builder
	prefix := ""
	for comp := range strings.SplitSeq(name, "-") {
		if comp == "" {
			return "", fmt.Errorf("invalid slice name %q", slice)
		}
		b.WriteString("/" + prefix + comp + ".slice")
		prefix += comp + "-"
	}
	return b.String(), nil
}

// GroupValue is how memory.oom.group (and a unified resource) writes b: "0" or "1".
func GroupValue(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func groupFile(root string, mode Mode, cg string) (string, error) {
	if mode != ModeV2 {
		return "", fmt.Errorf("memory.oom.group on cgroup %s host: %w", mode, ErrUnsupported)
	}
	return filepath.Join(MemoryCgroupDir(root, mode, cg), "memory.oom.group"), nil
}

// ReadOOMGroup returns the memory.oom.group flag of cgroup cg.
func ReadOOMGroup(root string, mode Mode, cg string) (bool, error) {
	p, err := groupFile(root, mode, cg)
	if err != nil {
		return false, err
	}
	v, err := ReadInt(p)
	return v != 0, err
}

// WriteOOMGroup sets memory.oom.group of cgroup cg.
func WriteOOMGroup(root string, mode Mode, cg string, on bool) error {
	p, err := groupFile(root, mode, cg)
	if err != nil {
		return err
	}
	return WriteFile(filepath.Join(root, CgroupMount), p, []byte(GroupValue(on)+"\n"))
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

// CgroupDir is one cgroup directory of a walk, held open: what is read
// through it is that cgroup's, however long its path (a pod names and nests
// its own cgroups at will, past PATH_MAX).
type CgroupDir struct {
	fd   int
	path string // for messages: the walk's cgroup, then each name below it
}

// Procs are the processes in this cgroup itself.
func (d *CgroupDir) Procs() ([]int, error) {
	b, err := readProcsAt(d.fd, d.path+"/")
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range bytes.FieldsSeq(b) {
		if pid, ok := ParseInt(f); ok && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Has reports whether pid is in this cgroup now.
func (d *CgroupDir) Has(pid int) bool {
	pids, err := d.Procs()
	return err == nil && slices.Contains(pids, pid)
}

// readProcsAt reads cgroup.procs in the directory dirfd holds; tests put a
// removed cgroup in.
var readProcsAt = func(dirfd int, dir string) ([]byte, error) { return readAt(dirfd, dir, "cgroup.procs", MaxTable) }

// MaxCgroupDepth bounds how deep below a container a walk goes: the
// kernel sets none, and each level holds a file descriptor.
const MaxCgroupDepth = 64

// UnreadError is the parts of a walk that could not be read (a name or a
// depth past the bounds, a directory that cannot be opened): each part is
// left out with what is below it, never the whole cgroup.
type UnreadError struct {
	Cgroup string
	Parts  int
	First  error
}

func (e *UnreadError) Error() string {
	return fmt.Sprintf("%d part(s) of cgroup %s could not be read, and their processes were left as they are: %v", e.Parts, e.Cgroup, e.First)
}
func (e *UnreadError) Unwrap() error { return e.First }

// WalkCgroup calls f with cg's directory and then every directory below
// it, depth first, each held open while f runs and opened relative to its
// parent, so that no path is ever longer than one name. A descendant
// removed meanwhile (ENOENT, or ENODEV while the kernel tears it down) is
// gone, as opencontainers/cgroups' GetAllPids has it; one that cannot be
// read otherwise is left out with its subtree and counted in an
// *UnreadError, returned once the walk is done. Only cg itself failing
// stops it.
func WalkCgroup(root string, mode Mode, cg string, f func(d *CgroupDir) error) error {
	top := MemoryCgroupDir(root, mode, cg)
	fd, err := syscall.Open(top, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("list pids of cgroup %s: %w", cg, &os.PathError{Op: "open", Path: top, Err: err})
	}
	w := &walk{cg: cg, f: f, counted: kernelFS(MemoryCgroupDir(root, mode, "/"))}
	err = w.dir(&CgroupDir{fd: fd, path: top}, 0)
	if err == nil && w.unread.Parts > 0 {
		return &w.unread
	}
	return err
}

type walk struct {
	cg     string
	f      func(d *CgroupDir) error
	unread UnreadError
	// counted: the tree is the kernel's (cgroupfs, kernfs), whose
	// directories' link counts count their subdirectories.
	counted bool
}

// skip counts a part the walk leaves out.
func (w *walk) skip(err error) {
	w.unread.Cgroup = w.cg
	if w.unread.Parts++; w.unread.First == nil {
		w.unread.First = err
	}
}

// dir runs f on d, then walks its children; it closes d.
func (w *walk) dir(d *CgroupDir, depth int) error {
	defer syscall.Close(d.fd)
	switch err := w.f(d); {
	case err == nil:
	case depth > 0 && removed(err): // what is below goes with it, or is read
	case depth > 0:
		w.skip(err)
		return nil
	default:
		return err
	}
	if w.counted && leaf(d) {
		return nil
	}
	names, err := subdirs(d)
	if err != nil {
		if depth > 0 && removed(err) {
			return nil
		}
		w.skip(err)
		return nil
	}
	for _, name := range names {
		if depth+1 > MaxCgroupDepth {
			w.skip(fmt.Errorf("%s/%s is more than %d levels below the container: not read", d.path, name, MaxCgroupDepth))
			continue
		}
		fd, err := syscall.Openat(d.fd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		switch {
		case removed(err):
			continue
		case err != nil:
			w.skip(&os.PathError{Op: "open", Path: d.path + "/" + name, Err: err})
			continue
		}
		if err := w.dir(&CgroupDir{fd: fd, path: d.path + "/" + name}, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// leaf reports whether d, a directory of the kernel's cgroup tree, holds
// no directory: kernfs gives a directory 2 links and one a subdirectory
// (kernfs_refresh_inode), so one stat tells, where listing a container's
// cgroup reads the names of its 30 to 60 files. Any other tree is listed
// (btrfs counts 1 link, whatever a directory holds).
func leaf(d *CgroupDir) bool {
	var st syscall.Stat_t
	return syscall.Fstat(d.fd, &st) == nil && st.Nlink == 2
}

// subdirs are the names of the directories d holds, read through its fd.
func subdirs(d *CgroupDir) ([]string, error) {
	dup, err := syscall.Dup(d.fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), d.path)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// CgroupPids lists the processes in cgroup cg and every cgroup below it
// (WalkCgroup): with an *UnreadError beside them when parts could not be
// read.
func CgroupPids(root string, mode Mode, cg string) ([]int, error) {
	var pids []int
	err := WalkCgroup(root, mode, cg, func(d *CgroupDir) error {
		p, err := d.Procs()
		pids = append(pids, p...)
		return err
	})
	return pids, err
}

func removed(err error) bool { return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENODEV) }

// MemoryEvents returns the counters of memory.events of cgroup cg (oom,
// oom_kill, oom_group_kill, …) on cgroup v2.
func MemoryEvents(root string, mode Mode, cg string) (map[string]uint64, error) {
	if mode != ModeV2 {
		return nil, fmt.Errorf("memory.events on cgroup %s host: %w", mode, ErrUnsupported)
	}
	b, err := ReadFile(filepath.Join(MemoryCgroupDir(root, mode, cg), "memory.events"), MaxSmall)
	if err != nil {
		return nil, err
	}
	return KeyValues(b), nil
}

// OOMKills is how many processes the OOM killer killed in cgroup cg and
// below it: memory.events' oom_kill on cgroup v2 (hierarchical); on v1,
// memory.oom_control's oom_kill (each cgroup's own, kernel 4.13 and
// later) summed over the tree.
func OOMKills(root string, mode Mode, cg string) (uint64, error) {
	if mode == ModeV2 {
		b, err := ReadFile(filepath.Join(MemoryCgroupDir(root, mode, cg), "memory.events"), MaxSmall)
		if err != nil {
			return 0, err
		}
		n, ok := KeyValue(b, "oom_kill")
		if !ok {
			return 0, fmt.Errorf("memory.events of %s has no oom_kill: %w", cg, ErrUnsupported)
		}
		return n, nil
	}
	each, err := OOMKillsByCgroup(root, mode, cg)
	var n uint64
	for _, c := range each {
		n += c.Kills
	}
	return n, err
}

// CgroupKills is one cgroup's own count of OOM kills in a container's tree.
type CgroupKills struct {
	Path string // below the container's cgroup: "" for itself, "/a/b" …
	// Ino is its directory's: a cgroup made again at a path is another.
	Ino   uint64
	Kills uint64
}

// OOMKillsByCgroup is, on cgroup v1, the count of each cgroup in cg's
// tree (memory.oom_control's oom_kill, each its own): a cgroup removed
// takes its kills out of the sum, and a reader that kept each count can
// keep them. On v2 it is cg's count alone, which holds its children's.
func OOMKillsByCgroup(root string, mode Mode, cg string) ([]CgroupKills, error) {
	if mode == ModeV2 {
		n, err := OOMKills(root, mode, cg)
		if err != nil {
			return nil, err
		}
		return []CgroupKills{{Kills: n}}, nil
	}
	top := MemoryCgroupDir(root, mode, cg)
	var out []CgroupKills
	var found bool
	err := WalkCgroup(root, mode, cg, func(d *CgroupDir) error {
		b, err := readAt(d.fd, d.path+"/", "memory.oom_control", MaxSmall)
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(d.fd, &st); err != nil {
			return &os.PathError{Op: "fstat", Path: d.path, Err: err}
		}
		v, ok := KeyValue(b, "oom_kill")
		found = found || ok
		out = append(out, CgroupKills{Path: strings.TrimPrefix(d.path, top), Ino: st.Ino, Kills: v})
		return nil
	})
	if err == nil && !found {
		return nil, fmt.Errorf("memory.oom_control of %s has no oom_kill (a kernel before 4.13): %w", cg, ErrUnsupported)
	}
	return out, err
}

// MemoryLimit is cgroup cg's own memory limit in bytes; false when it has none.
func MemoryLimit(root string, mode Mode, cg string) (int64, bool) {
	name := "memory.max"
	if mode != ModeV2 {
		name = "memory.limit_in_bytes"
	}
	b, err := ReadFile(filepath.Join(MemoryCgroupDir(root, mode, cg), name), MaxSmall)
	if err != nil {
		return 0, false
	}
	v, ok := parseMemory(b)
	return v, ok && v < maxMemory
}

// maxMemory is "no limit": v1 writes PAGE_COUNTER_MAX in bytes, near 2^63.
const maxMemory = 1 << 62

// MemoryHeadroom is how much more the cgroup cg may take before a limit of
// its own or of an ancestor stops it, and which cgroup's limit that is;
// limited is false when none has one.
func MemoryHeadroom(root string, mode Mode, cg string) (headroom int64, by string, limited bool, err error) {
	curName := "memory.current"
	if mode != ModeV2 {
		curName = "memory.usage_in_bytes"
	}
	headroom = 1<<63 - 1
	for dir := path.Clean("/" + cg); ; dir = path.Dir(dir) {
		if l, ok := MemoryLimit(root, mode, dir); ok {
			p := filepath.Join(MemoryCgroupDir(root, mode, dir), curName)
			cur, err := ReadFile(p, MaxSmall)
			if err != nil {
				return 0, "", false, err
			}
			u, ok := parseMemory(cur)
			if !ok {
				return 0, "", false, &ParseError{Path: p, Err: fmt.Errorf("%q is not a byte count", bytes.TrimSpace(cur))}
			}
			if h := max(0, l-u); h < headroom {
				headroom, by, limited = h, dir, true
			}
		}
		if dir == "/" {
			return headroom, by, limited, nil
		}
	}
}

// parseMemory reads a cgroup memory value; "max" is unlimited.
func parseMemory(b []byte) (int64, bool) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 1<<63 - 1, true
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	return v, err == nil && v >= 0
}

// CgroupNSDepth is how deep the reader's cgroup namespace is below the
// hierarchy's root, as pid 1 (in the root cgroup or init.scope) shows it:
// "/../../init.scope" from two levels down. 0 in the host's namespace, or
// when pid 1 cannot be read.
func CgroupNSDepth(root string, mode Mode) int {
	cg, err := ProcCgroup(root, mode, 1)
	if err != nil {
		return 0
	}
	n := 0
	for c := range strings.SplitSeq(strings.TrimPrefix(cg, "/"), "/") {
		if c != ".." {
			break
		}
		n++
	}
	return n
}
