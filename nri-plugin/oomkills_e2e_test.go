//go:build e2e

package nriplugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/testbin"
)

// Real OOM kills in real memory cgroups on this host's cgroup v1 (where
// memory.events does not exist): past the kernel's rate limit (ten
// oom-kill records in five seconds), in a child of a container named as
// another container's cgroup (removed after, taking its kills out of A's
// summed count), and in two containers at once, the built plugin reports
// every kill in the container it happened in, or says it cannot tell
// which of two: never another's.
func TestE2EKillsAttributedOnCgroupV1(t *testing.T) {
	mode := kernel.DetectMode("/")
	if mode != kernel.ModeV1 && mode != kernel.ModeHybrid {
		t.Skip("this host is cgroup v2; the VM tier covers v2")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: memory cgroups and /dev/kmsg")
	}
	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	uid := fmt.Sprintf("e2e%d", os.Getpid())
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	dirs := map[string]string{} // container name: its memory cgroup
	for _, n := range []string{"a", "b"} {
		pod := nriruntime.KubeletPod(uid+n, "ml", "guaranteed", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", 0, "/app")
		pods, ctrs = append(pods, pod), append(ctrs, ctr)
		dir := kernel.MemoryCgroupDir("/", mode, mustResolve(t, ctr.Linux.CgroupsPath))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeTree(dir) })
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte("16M"), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs[n] = dir
	}
	t.Cleanup(func() { os.Remove(kernel.MemoryCgroupDir("/", mode, "/kubepods.slice")) })
	// A child of A named as B's own cgroup is.
	forged := filepath.Join(dirs["a"], filepath.Base(dirs["b"]))
	if err := os.Mkdir(forged, 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := nriruntime.Start(nriDir(t), pods, ctrs)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	var log syncbuf.Buffer
	rt.PluginLog = &log
	plugin, err := rt.StartPlugin(bin, "--config", shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { plugin.Process.Kill(); plugin.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), "synchronized"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin did not synchronize:\n%s", log.String())
		}
	}

	truth := map[int]string{} // pid: the container it ran in
	hog := func(container, dir string) {
		cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec tail /dev/zero`, "sh", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		truth[cmd.Process.Pid] = container
		cmd.Wait()
	}
	for range 25 { // past the rate limit
		hog("a", dirs["a"])
	}
	for range 3 {
		hog("a", forged)
	}
	// The child removed, as systemd removes a unit's cgroup, once its kills
	// are read: they leave A's summed count, never the books (A's next
	// kills are A's, or unsure, never outside every pod). Removed before
	// its last kill was read, that kill is unsure: its count went with it.
	for deadline := time.Now().Add(30 * time.Second); strings.Count(log.String(), `msg="OOM kill"`) < len(truth) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	removeTree(forged)
	for range 10 { // two containers, one after the other
		hog("a", dirs["a"])
		hog("b", dirs["b"])
	}
	reported := map[int]string{}
	line := regexp.MustCompile(`msg="OOM kill" (?:component=\S+ )?(?:pod=ml/pod-` + uid + `(\w) container=main )?pid=(\d+) .*`)
	for deadline := time.Now().Add(30 * time.Second); len(reported) < len(truth); time.Sleep(100 * time.Millisecond) {
		for _, m := range line.FindAllStringSubmatch(log.String(), -1) {
			var pid int
			fmt.Sscan(m[2], &pid)
			switch {
			case m[1] != "":
				reported[pid] = m[1]
			case strings.Contains(m[0], "attributed=false"):
				reported[pid] = "unsure"
			default:
				reported[pid] = "none"
			}
		}
		if time.Now().After(deadline) {
			break
		}
	}
	counts := map[string]int{}
	for pid, want := range truth {
		got := reported[pid]
		counts[got]++
		if got != want && got != "unsure" {
			t.Errorf("pid %d ran in %s, reported as %q", pid, want, got)
		}
	}
	t.Logf("%d kills: %v", len(truth), counts)
	if counts["a"] < 28 {
		t.Errorf("of the %d kills in A alone (past the rate limit, and in its forged child), %d reported as A's", 28, counts["a"])
	}
	if t.Failed() {
		t.Logf("plugin:\n%s", log.String())
	}
}

// removeTree removes a cgroup and the cgroups below it.
func removeTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}

// A VM-like pod names and nests its own cgroups: 17 levels of 250-byte
// names put a process's cgroup past PATH_MAX. The built plugin, synchronizing with a runtime whose
// container already runs, sets it as every other process of the container.
func TestE2EProcessInADeepCgroupSet(t *testing.T) {
	mode := kernel.DetectMode("/")
	if os.Geteuid() != 0 || mode == kernel.ModeUnknown {
		t.Skip("needs root and memory cgroups")
	}
	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	pod := nriruntime.KubeletPod(fmt.Sprintf("deep%d", os.Getpid()), "ml", "guaranteed", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", 0, "/sbin/init")
	dir := kernel.MemoryCgroupDir("/", mode, mustResolve(t, ctr.Linux.CgroupsPath))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeDeep(dir) })
	t.Cleanup(func() { os.Remove(filepath.Dir(dir)); os.Remove(kernel.MemoryCgroupDir("/", mode, "/kubepods.slice")) })
	start := func(join func(pid int) error) *exec.Cmd {
		cmd := exec.Command("/bin/sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if err := join(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	top := start(func(pid int) error {
		return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
	})
	deep := start(func(pid int) error { return joinDeep(dir, 17, pid) })
	rt, err := nriruntime.Start(nriDir(t), []*api.PodSandbox{pod}, []*api.Container{ctr})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	var log syncbuf.Buffer
	rt.PluginLog = &log
	plugin, err := rt.StartPlugin(bin, "--config", shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { plugin.Process.Kill(); plugin.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), "synchronized"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin did not synchronize:\n%s", log.String())
		}
	}
	for name, cmd := range map[string]*exec.Cmd{"the container's own": top, "17 levels below": deep} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid))
		if s := strings.TrimSpace(string(b)); s != "900" {
			t.Errorf("the process %s is at %s, want 900\nplugin:\n%s", name, s, log.String())
		}
	}
}

// joinDeep makes levels cgroups of 250-byte names below dir, each relative
// to its parent, and moves pid into the deepest.
func joinDeep(dir string, levels, pid int) error {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	name := strings.Repeat("n", 250)
	for range levels {
		if err := syscall.Mkdirat(fd, name, 0o755); err != nil {
			syscall.Close(fd)
			return err
		}
		next, err := syscall.Openat(fd, name, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		syscall.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	defer syscall.Close(fd)
	f, err := syscall.Openat(fd, "cgroup.procs", syscall.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(f)
	_, err = syscall.Write(f, []byte(strconv.Itoa(pid)))
	return err
}

// removeDeep removes the cgroups joinDeep made, and dir, once empty.
func removeDeep(dir string) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	name := strings.Repeat("n", 250)
	fds := []int{fd}
	for {
		next, err := syscall.Openat(fds[len(fds)-1], name, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			break
		}
		fds = append(fds, next)
	}
	for i := len(fds) - 1; i > 0; i-- {
		syscall.Close(fds[i])
		unixUnlinkDir(fds[i-1], name)
	}
	syscall.Close(fds[0])
	os.Remove(dir)
}

func unixUnlinkDir(dirfd int, name string) { unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR) }
