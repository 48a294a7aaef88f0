package kernel

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/cgroups/fscommon"
	"github.com/opencontainers/cgroups/systemd"
)

// tree writes files (path → content) under a new temporary root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	v2Cgroup     = "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n"
	v1Cgroup     = "12:pids:/kubepods/pod1/abc\n11:cpu,cpuacct:/kubepods/pod1/abc\n4:memory:/kubepods/pod1/abc\n1:name=systemd:/kubepods/pod1/abc\n"
	hybridCgroup = v1Cgroup + "0::/kubepods/pod1/abc\n"
)

func TestDetectModeAndProcCgroup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		mode  Mode
		cg    string
	}{
		{"v2", map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpu memory", "proc/7/cgroup": v2Cgroup},
			ModeV2, "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"},
		{"v1", map[string]string{"sys/fs/cgroup/memory/tasks": "", "proc/7/cgroup": v1Cgroup},
			ModeV1, "/kubepods/pod1/abc"},
		{"hybrid", map[string]string{"sys/fs/cgroup/memory/tasks": "", "sys/fs/cgroup/unified/cgroup.controllers": "", "proc/7/cgroup": hybridCgroup},
			ModeHybrid, "/kubepods/pod1/abc"},
		{"path with colon", map[string]string{"sys/fs/cgroup/cgroup.controllers": "", "proc/7/cgroup": "0::/a:b\n"},
			ModeV2, "/a:b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			if m := DetectMode(root); m != tc.mode {
				t.Fatalf("mode %s, want %s", m, tc.mode)
			}
			cg, err := ProcCgroup(root, tc.mode, 7)
			if err != nil || cg != tc.cg {
				t.Fatalf("ProcCgroup = %q, %v; want %q", cg, err, tc.cg)
			}
		})
	}
	if m := DetectMode(t.TempDir()); m != ModeUnknown {
		t.Fatalf("empty root: mode %s", m)
	}
}

func TestProcCgroupErrors(t *testing.T) {
	root := tree(t, map[string]string{"proc/7/cgroup": "garbage\n1:name=systemd:/x\n"})
	if _, err := ProcCgroup(root, ModeV1, 7); err == nil {
		t.Fatal("want an error for a file without a memory line")
	}
	if _, err := ProcCgroup(root, ModeV2, 7); err == nil {
		t.Fatal("want an error for a file without a 0:: line")
	}
	if _, err := ProcCgroup(root, ModeV2, 8); !IsGone(err) {
		t.Fatalf("vanished pid: want a not-exist error, got %v", err)
	}
}

func TestResolveCgroupsPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/kubepods/burstable/pod1/abc", "/kubepods/burstable/pod1/abc"},
		{"/kubepods//pod1/../pod1/abc/", "/kubepods/pod1/abc"},
		{"mygroup/abc", "/mygroup/abc"},
		{"kubepods-burstable-pod1.slice:cri-containerd:abc", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope"},
		{"kubepods-pod1.slice:crio:abc", "/kubepods.slice/kubepods-pod1.slice/crio-abc.scope"},
		{"system.slice:docker:abc", "/system.slice/docker-abc.scope"},
		{":runc:abc", "/system.slice/runc-abc.scope"},
		{"user.slice::abc", "/user.slice/abc.scope"},
		{"-.slice:p:abc", "/p-abc.scope"},
		{"kubepods.slice:crio:pod-x.slice", "/kubepods.slice/pod-x.slice"},
	} {
		got, err := ResolveCgroupsPath(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ResolveCgroupsPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "kubepods:crio:abc", "a--b.slice:p:x", "-a.slice:p:x", "a/b.slice:p:x"} {
		if got, err := ResolveCgroupsPath(bad); err == nil {
			t.Errorf("ResolveCgroupsPath(%q) = %q, want an error", bad, got)
		}
	}
}

func TestOOMGroup(t *testing.T) {
	const pod = "sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/"
	root := tree(t, map[string]string{
		"sys/fs/cgroup/cgroup.controllers":              "memory",
		"sys/fs/cgroup/kubepods.slice/memory.oom.group": "0\n",
		pod + "memory.oom.group":                        "0\n",
		pod + "ctr/memory.oom.group":                    "1\n",
		pod + "ctr/cgroup.procs":                        "10\n11\n",
		pod + "ctr/init.scope/cgroup.procs":             "12\n",
		pod + "ctr/init.scope/memory.oom.group":         "0\n",
	})
	const ctr = "/kubepods.slice/kubepods-pod1.slice/ctr"
	on, err := ReadOOMGroup(root, ModeV2, ctr)
	if err != nil || !on {
		t.Fatalf("ReadOOMGroup = %v, %v", on, err)
	}
	on, by, err := EffectiveOOMGroup(root, ModeV2, ctr+"/init.scope")
	if err != nil || !on || by != ctr {
		t.Fatalf("child of a group cgroup: effective = %v by %q, %v", on, by, err)
	}
	if err := WriteOOMGroup(root, ModeV2, ctr, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, pod, "ctr/memory.oom.group")); string(b) != "0\n" {
		t.Fatalf("file holds %q", b)
	}
	if on, by, err := EffectiveOOMGroup(root, ModeV2, ctr+"/init.scope"); err != nil || on || by != "" {
		t.Fatalf("after clearing: effective = %v by %q, %v", on, by, err)
	}
	// The pod level set: the container is killed whole even with its own flag off.
	if err := WriteOOMGroup(root, ModeV2, "/kubepods.slice/kubepods-pod1.slice", true); err != nil {
		t.Fatal(err)
	}
	if on, by, _ := EffectiveOOMGroup(root, ModeV2, ctr); !on || by != "/kubepods.slice/kubepods-pod1.slice" {
		t.Fatalf("ancestor: effective = %v by %q", on, by)
	}
	pids, err := CgroupPids(root, ModeV2, ctr)
	slices.Sort(pids)
	if err != nil || !slices.Equal(pids, []int{10, 11, 12}) {
		t.Fatalf("CgroupPids = %v, %v", pids, err)
	}

	// A cgroup that vanished.
	if err := WriteOOMGroup(root, ModeV2, "/gone", false); !IsGone(err) {
		t.Fatalf("vanished cgroup: want not-exist, got %v", err)
	}
	if _, _, err := EffectiveOOMGroup(root, ModeV2, "/gone"); !IsGone(err) {
		t.Fatalf("vanished cgroup: want not-exist, got %v", err)
	}
	if _, err := CgroupPids(root, ModeV2, "/gone"); !IsGone(err) {
		t.Fatalf("vanished cgroup: want not-exist, got %v", err)
	}
	// cgroup v1 has no memory.oom.group.
	for _, m := range []Mode{ModeV1, ModeHybrid} {
		if err := WriteOOMGroup(root, m, ctr, false); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("%s: want ErrUnsupported, got %v", m, err)
		}
		if _, err := ReadOOMGroup(root, m, ctr); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("%s: want ErrUnsupported, got %v", m, err)
		}
	}
}

func TestMemoryCgroupDir(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		cg   string
		want string
	}{
		{ModeV2, "/a/b", "/r/sys/fs/cgroup/a/b"},
		{ModeV1, "/a/b", "/r/sys/fs/cgroup/memory/a/b"},
		{ModeHybrid, "a/b", "/r/sys/fs/cgroup/memory/a/b"},
		{ModeV2, "/../../etc", "/r/sys/fs/cgroup/etc"},
	} {
		if got := MemoryCgroupDir("/r", tc.mode, tc.cg); got != tc.want {
			t.Errorf("MemoryCgroupDir(%s, %q) = %q, want %q", tc.mode, tc.cg, got, tc.want)
		}
	}
}

func TestOOMScoreAdj(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/5/oom_score_adj": "-997\n",
		"proc/5/cgroup":        "0::/kubepods/pod1/c\n",
		"proc/6/oom_score_adj": "garbage",
		"proc/self/status":     "",
	})
	if v, err := ReadOOMScoreAdj(root, 5); err != nil || v != -997 {
		t.Fatalf("ReadOOMScoreAdj = %d, %v", v, err)
	}
	d, err := OpenProc(root, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetOOMScoreAdj(900); err != nil {
		t.Fatal(err)
	}
	if v, err := d.OOMScoreAdj(); err != nil || v != 900 {
		t.Fatalf("after write: %d, %v", v, err)
	}
	if cg, err := d.Cgroup(ModeV2); err != nil || cg != "/kubepods/pod1/c" {
		t.Fatalf("Cgroup = %q, %v", cg, err)
	}
	if _, err := ReadOOMScoreAdj(root, 6); err == nil {
		t.Fatal("garbage: want a parse error")
	}
	for _, v := range []int{-1001, 1001} {
		if err := d.SetOOMScoreAdj(v); err == nil {
			t.Fatalf("%d: want a range error", v)
		}
	}
	if _, err := OpenProc(root, 99); !IsGone(err) {
		t.Fatalf("vanished pid: want not-exist, got %v", err)
	}
	if err := WriteFile(filepath.Join(root, "proc"), filepath.Join(root, "proc/99/oom_score_adj"), []byte("900\n")); !IsGone(err) {
		t.Fatalf("vanished pid: want not-exist, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "proc/99")); err == nil {
		t.Fatal("writing to a vanished pid must not create it")
	}
	if pids, _ := ListPids(root); !slices.Equal(pids, []int{5, 6}) {
		t.Fatalf("ListPids = %v", pids)
	}
}

// The real /proc of this machine, through the same code.
func TestRealProc(t *testing.T) {
	pid := os.Getpid()
	d, err := OpenProc("/", pid)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	v, err := d.OOMScoreAdj()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetOOMScoreAdj(v); err != nil {
		t.Fatalf("rewriting our own value: %v", err)
	}
	mode := DetectMode("/")
	if mode == ModeUnknown {
		t.Skip("no cgroup filesystem")
	}
	if _, err := ProcCgroup("/", mode, pid); err != nil {
		t.Fatal(err)
	}
}

func TestSameProcess(t *testing.T) {
	root := tree(t, map[string]string{"proc/100/task/100/stat": "", "proc/100/task/101/stat": "", "proc/101/stat": "", "proc/102/stat": "", "proc/103/task/103/stat": ""})
	for _, tc := range []struct {
		pid, tid    int
		same, known bool
	}{
		{100, 101, true, true}, {100, 100, true, true}, // its thread; itself
		{100, 102, false, true},                            // another process
		{103, 101, false, true},                            // another's thread
		{100, 104, false, false}, {105, 104, false, false}, // gone
	} {
		if same, known := SameProcess(root, tc.pid, tc.tid); same != tc.same || known != tc.known {
			t.Errorf("SameProcess(%d, %d) = %v, %v; want %v, %v", tc.pid, tc.tid, same, known, tc.same, tc.known)
		}
	}
	// The real /proc: a thread of this process, and the test's parent.
	tids, done := make(chan int), make(chan struct{})
	defer close(done)
	go func() {
		runtime.LockOSThread()
		tids <- syscall.Gettid()
		<-done
	}()
	if same, known := SameProcess("/", os.Getpid(), <-tids); !same || !known {
		t.Errorf("a thread of this process: same %v known %v", same, known)
	}
	if same, known := SameProcess("/", os.Getpid(), os.Getppid()); same || !known {
		t.Errorf("the parent: same %v known %v", same, known)
	}
}

func TestMemoryEvents(t *testing.T) {
	root := tree(t, map[string]string{
		"sys/fs/cgroup/cgroup.controllers": "memory",
		"sys/fs/cgroup/a/memory.events":    "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n",
	})
	ev, err := MemoryEvents(root, ModeV2, "/a")
	if err != nil || ev["oom_kill"] != 2 || ev["oom_group_kill"] != 1 || ev["max"] != 12 {
		t.Fatalf("events %v, %v", ev, err)
	}
	if _, err := MemoryEvents(root, ModeV2, "/gone"); !IsGone(err) {
		t.Fatalf("vanished: %v", err)
	}
	if _, err := MemoryEvents(root, ModeV1, "/a"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("v1: %v", err)
	}
}

func TestMemoryHeadroom(t *testing.T) {
	root := tree(t, map[string]string{
		"sys/fs/cgroup/cgroup.controllers":   "memory",
		"sys/fs/cgroup/a/memory.max":         "1073741824\n",
		"sys/fs/cgroup/a/memory.current":     "73741824\n",
		"sys/fs/cgroup/a/b/memory.max":       "max\n",
		"sys/fs/cgroup/a/b/c/memory.max":     "2147483648\n",
		"sys/fs/cgroup/a/b/c/memory.current": "1024\n",
		"sys/fs/cgroup/x/memory.max":         "4096\n",
		"sys/fs/cgroup/x/memory.current":     "garbage\n",
		"sys/fs/cgroup/y/memory.max":         "4096\n",
	})
	if h, by, limited, err := MemoryHeadroom(root, ModeV2, "/a/b/c"); err != nil || !limited || by != "/a" || h != 1<<30-73741824 {
		t.Fatalf("headroom %d by %s limited %v: %v", h, by, limited, err)
	}
	if _, _, limited, err := MemoryHeadroom(root, ModeV2, "/free"); err != nil || limited {
		t.Fatalf("no limit: %v %v", limited, err)
	}
	// A usage that does not parse names the file and what it holds, not "<nil>".
	var pe *ParseError
	if _, _, _, err := MemoryHeadroom(root, ModeV2, "/x"); !errors.As(err, &pe) || strings.Contains(err.Error(), "<nil>") ||
		!strings.Contains(err.Error(), "x/memory.current") || !strings.Contains(err.Error(), "garbage") {
		t.Fatalf("an unparsable usage: want a parse error naming the file, got %v", err)
	}
	if _, _, _, err := MemoryHeadroom(root, ModeV2, "/y"); !IsGone(err) {
		t.Fatalf("a missing usage: want not-exist, got %v", err)
	}
}

func TestProcReader(t *testing.T) {
	long := strings.Repeat("x", 9000)
	root := tree(t, map[string]string{
		"proc/7/stat":          "7 (my (odd) name) S 1 7 7 0 -1 4194560 0 0\n",
		"proc/7/cmdline":       "/bin/" + long + "\x00-v\x00",
		"proc/7/status":        "Name:\tmy (odd) name\nVmPeak:\t  9000 kB\nVmRSS:\t  4096 kB\nRssAnon:\t 4000 kB\nVmPTE:\t    64 kB\nVmSwap:\t   128 kB\nThreads:\t1\n",
		"proc/7/oom_score_adj": "-997\n",
		"proc/7/cgroup":        "0::/kubepods/pod1/c\n",
		"proc/2/stat":          "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0\n",
		"proc/2/cmdline":       "",
		"proc/2/status":        "Name:\tkthreadd\nThreads:\t1\n",
		"proc/2/oom_score_adj": "0",
		"proc/2/cgroup":        "0::/\n",
	})
	r := NewProcReader(root, ModeV2)
	p, err := r.Read(7)
	if err != nil || p.Comm != "my (odd) name" || p.PPid != 1 || p.Kernel || p.MemKB != 4096+64+128 || p.OOMScoreAdj != -997 ||
		p.Cgroup != "/kubepods/pod1/c" || len(p.Cmdline) != 2 || p.Cmdline[0] != "/bin/"+long {
		t.Fatalf("%+v %v", p, err)
	}
	if k, err := r.Read(2); err != nil || !k.Kernel {
		t.Fatalf("kernel thread: %+v %v", k, err)
	}
	if _, err := r.Read(99); !IsGone(err) {
		t.Fatalf("vanished: %v", err)
	}
}

// A descendant cgroup removed while the walk reads it answers ENOENT, or
// ENODEV while the kernel tears it down: it is gone, not an error of the
// whole container's pass.
func TestCgroupPidsDescendantRemoved(t *testing.T) {
	const ctr = "sys/fs/cgroup/kubepods/pod1/ctr/"
	root := tree(t, map[string]string{
		"sys/fs/cgroup/cgroup.controllers": "memory",
		ctr + "cgroup.procs":               "10\n",
		ctr + "dying/cgroup.procs":         "11\n",
		ctr + "live/cgroup.procs":          "12\n",
	})
	for _, errno := range []error{syscall.ENODEV, syscall.ENOENT} {
		t.Run(errno.Error(), func(t *testing.T) {
			orig := readProcsAt
			defer func() { readProcsAt = orig }()
			readProcsAt = func(fd int, dir string) ([]byte, error) {
				if strings.HasSuffix(dir, "/dying/") {
					return nil, &os.PathError{Op: "read", Path: dir + "cgroup.procs", Err: errno}
				}
				return orig(fd, dir)
			}
			pids, err := CgroupPids(root, ModeV2, "/kubepods/pod1/ctr")
			slices.Sort(pids)
			if err != nil || !slices.Equal(pids, []int{10, 12}) {
				t.Fatalf("CgroupPids = %v, %v; want the live cgroups' pids", pids, err)
			}
			readProcsAt = func(_ int, dir string) ([]byte, error) {
				return nil, &os.PathError{Op: "read", Path: dir + "cgroup.procs", Err: errno}
			}
			if _, err := CgroupPids(root, ModeV2, "/kubepods/pod1/ctr"); !IsGone(err) {
				t.Fatalf("the container's own cgroup removed: want gone, got %v", err)
			}
		})
	}
}

// ExpandSlice is the field's logic, kept here for the hook's size: it
// agrees with opencontainers/cgroups' systemd.ExpandSlice on every input.
func TestExpandSliceIsTheField(t *testing.T) {
	for _, s := range []string{"a.slice", "a-b-c.slice", "-.slice", "kubepods-burstable-pod1_2.slice", ".slice", "a--b.slice",
		"-a.slice", "a-.slice", "a/b.slice", "a", "slice", "a.slice.slice", "x-y.service"} {
		got, err := ExpandSlice(s)
		want, werr := systemd.ExpandSlice(s)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("ExpandSlice(%q) = %q, %v; opencontainers/cgroups says %q, %v", s, got, err, want, werr)
		}
	}
}

// KeyValues reads what fscommon.ParseKeyValue reads, line by line.
func TestKeyValuesIsTheField(t *testing.T) {
	text := "low 0\nhigh 7\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n\nbad\nneg -1\n"
	kv := KeyValues([]byte(text))
	for _, line := range strings.Split(text, "\n") {
		k, v, err := fscommon.ParseKeyValue(line)
		if got, ok := kv[k]; err == nil && (!ok || got != v) {
			t.Errorf("%q: KeyValues has %d, %v; fscommon %d", line, got, ok, v)
		} else if err != nil && ok && k != "" {
			t.Errorf("%q: KeyValues took it, fscommon refuses: %v", line, err)
		}
	}
	if len(kv) != 7 {
		t.Errorf("KeyValues = %v", kv)
	}
}

func TestCgroupPath(t *testing.T) {
	for _, tc := range []struct {
		text string
		mode Mode
		want string
	}{
		{v2Cgroup, ModeV2, "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"},
		{v1Cgroup, ModeV1, "/kubepods/pod1/abc"},
		{hybridCgroup, ModeHybrid, "/kubepods/pod1/abc"},
		{hybridCgroup, ModeV2, "/kubepods/pod1/abc"},
		{"0::/a:b:c\n", ModeV2, "/a:b:c"},
		{"3:cpu,memory,pids:/x\n", ModeV1, "/x"},
		{"3:memoryx:/x\n", ModeV1, ""},
		{"0:memory:/x\n", ModeV2, ""},
		{"", ModeV2, ""},
	} {
		got, err := CgroupPath([]byte(tc.text), tc.mode)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("CgroupPath(%q, %s) = %q, %v; want %q", tc.text, tc.mode, got, err, tc.want)
		}
	}
}

// A process names itself in /proc/PID/status (Name: is its comm): a name
// that looks like a key must not hide the real line.
func TestStatusKB(t *testing.T) {
	for _, tc := range []struct {
		text, key string
		want      int64
	}{
		{"Name:\tx\nVmRSS:\t  4096 kB\n", "VmRSS:", 4096},
		{"Name:\tVmRSS: 99 kB\nVmRSS:\t  4096 kB\n", "VmRSS:", 4096},
		{"VmRSS: 7 kB\n", "VmRSS:", 7},
		{"XVmRSS: 7 kB\n", "VmRSS:", 0},
		{"VmRSS: -7 kB\n", "VmRSS:", 0},
		{"", "VmRSS:", 0},
	} {
		if got := StatusKB([]byte(tc.text), tc.key); got != tc.want {
			t.Errorf("StatusKB(%q, %q) = %d, want %d", tc.text, tc.key, got, tc.want)
		}
	}
}

// deepTree makes levels nested directories of 250-byte names below dir,
// each created relative to its parent (their path is past PATH_MAX), with
// a cgroup.procs holding pid at the bottom; it returns nothing: the
// directory is dir's.
func deepTree(t *testing.T, dir string, levels, pid int) {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("n", 250)
	for range levels {
		if err := syscall.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := syscall.Openat(fd, name, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		syscall.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer syscall.Close(fd)
	f, err := syscall.Openat(fd, "cgroup.procs", syscall.O_WRONLY|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Write(f, []byte(strconv.Itoa(pid)+"\n"))
	syscall.Close(f)
}

// A pod names and nests its cgroups at will: a part of the container's
// tree whose path is past PATH_MAX is read relative to its parent, and one
// past the walk's depth is left out alone and said, never the whole
// container.
func TestCgroupPidsDeepTree(t *testing.T) {
	const ctr = "sys/fs/cgroup/kubepods/pod1/ctr/"
	root := tree(t, map[string]string{
		"sys/fs/cgroup/cgroup.controllers": "memory",
		ctr + "cgroup.procs":               "10\n",
		ctr + "a/cgroup.procs":             "11\n",
	})
	deepTree(t, filepath.Join(root, ctr, "a"), 17, 12)
	pids, err := CgroupPids(root, ModeV2, "/kubepods/pod1/ctr")
	slices.Sort(pids)
	if err != nil || !slices.Equal(pids, []int{10, 11, 12}) {
		t.Fatalf("CgroupPids = %v, %v; want every process, the deep one too", pids, err)
	}
	deepTree(t, filepath.Join(root, ctr), MaxCgroupDepth+3, 13)
	pids, err = CgroupPids(root, ModeV2, "/kubepods/pod1/ctr")
	slices.Sort(pids)
	var unread *UnreadError
	if !errors.As(err, &unread) || unread.Parts != 1 || !slices.Equal(pids, []int{10, 11, 12}) {
		t.Fatalf("CgroupPids = %v, %v; want every process but the one too deep, and that part said", pids, err)
	}
}

// The kernel's own files are written without truncation, a tree's with it:
// a shorter value over a longer one leaves nothing behind in a tree.
func TestWritesTruncateOnlyTrees(t *testing.T) {
	if !kernelFS("/proc") {
		t.Fatal("/proc is not taken for the kernel's procfs")
	}
	root := t.TempDir()
	if kernelFS(filepath.Join(root, "proc")) {
		t.Fatal("a directory of a test's tree is taken for procfs")
	}
	if _, remembered := kernelFSes.Load(filepath.Join(root, "proc")); remembered {
		t.Fatal("a directory not there yet was remembered")
	}
	os.MkdirAll(filepath.Join(root, "proc/7"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/7/oom_score_adj"), []byte("-1000\n"), 0o644)
	if err := WriteScore(root, 7, 900); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "proc/7/oom_score_adj")); string(b) != "900\n" {
		t.Fatalf("a tree's file holds %q after the write", b)
	}
	d, err := OpenProc(root, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetOOMScoreAdj(5); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "proc/7/oom_score_adj")); string(b) != "5\n" {
		t.Fatalf("a tree's file holds %q after the write through its directory", b)
	}
	// This process's own score, written as it is: the kernel takes it whole.
	self, err := ReadInt("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteScore("/", os.Getpid(), self); err != nil {
		t.Fatalf("writing the kernel's own file: %v", err)
	}
	if got, _ := ReadInt("/proc/self/oom_score_adj"); got != self {
		t.Fatalf("oom_score_adj %d after writing %d", got, self)
	}
}

// On cgroup v1 each cgroup counts its own kills: the container's count is
// their sum, and each is told with its cgroup, so that a reader can keep
// the kills of a child removed; a child made again at its path is another.
func TestOOMKillsByCgroup(t *testing.T) {
	const cg = "/kubepods/podU/ctr"
	oc := func(n int) string { return "oom_kill_disable 0\nunder_oom 0\noom_kill " + strconv.Itoa(n) + "\n" }
	root := tree(t, map[string]string{
		"sys/fs/cgroup/memory" + cg + "/memory.oom_control":                        oc(1),
		"sys/fs/cgroup/memory" + cg + "/system.slice/memory.oom_control":           oc(0),
		"sys/fs/cgroup/memory" + cg + "/system.slice/a.service/memory.oom_control": oc(3),
		"sys/fs/cgroup/memory" + cg + "/user.slice/memory.oom_control":             oc(2),
		"sys/fs/cgroup/memory/kubepods/podU/other/memory.oom_control":              oc(9),
		"sys/fs/cgroup/kubepods/podU/ctr/memory.events":                            "oom 7\noom_kill 7\n",
	})
	got := func() map[string]CgroupKills {
		t.Helper()
		each, err := OOMKillsByCgroup(root, ModeV1, cg)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]CgroupKills{}
		for _, c := range each {
			if c.Ino == 0 {
				t.Errorf("%q: no inode", c.Path)
			}
			m[c.Path] = c
		}
		return m
	}
	first := got()
	want := map[string]uint64{"": 1, "/system.slice": 0, "/system.slice/a.service": 3, "/user.slice": 2}
	if len(first) != len(want) {
		t.Fatalf("cgroups %v, want %v", first, want)
	}
	for p, n := range want {
		if first[p].Kills != n {
			t.Errorf("%q: %d kills, want %d", p, first[p].Kills, n)
		}
	}
	if n, err := OOMKills(root, ModeV1, cg); err != nil || n != 6 {
		t.Errorf("OOMKills = %d, %v; want the sum, 6", n, err)
	}
	// The unit's cgroup removed, and made again.
	dir := filepath.Join(root, "sys/fs/cgroup/memory", cg, "system.slice/a.service")
	keep := filepath.Join(root, "kept")
	if err := os.Rename(dir, keep); err != nil { // its inode stays taken
		t.Fatal(err)
	}
	if n, _ := OOMKills(root, ModeV1, cg); n != 3 {
		t.Errorf("after the unit's removal OOMKills = %d, want 3", n)
	}
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte(oc(0)), 0o644)
	if again := got()["/system.slice/a.service"]; again.Ino == first["/system.slice/a.service"].Ino || again.Kills != 0 {
		t.Errorf("made again: %+v, was %+v", again, first["/system.slice/a.service"])
	}
	// On v2 the container's count holds its children's.
	if each, err := OOMKillsByCgroup(root, ModeV2, cg); err != nil || len(each) != 1 || each[0].Kills != 7 || each[0].Path != "" {
		t.Errorf("v2: %+v, %v", each, err)
	}
	if _, err := OOMKillsByCgroup(tree(t, map[string]string{"sys/fs/cgroup/memory" + cg + "/memory.oom_control": "under_oom 0\n"}), ModeV1, cg); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a kernel before 4.13: %v", err)
	}
}
