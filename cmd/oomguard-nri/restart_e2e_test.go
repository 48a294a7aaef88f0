//go:build e2e

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/install"
)

// systemdUnit stands for containerd.service: install restarts it by name.
// Without default dependencies nothing else starts: systemd-tmpfiles would
// empty the machine's /tmp at "boot".
const systemdUnit = `[Unit]
DefaultDependencies=no
[Service]
ExecStart=/bin/sleep 100000
`

// systemdBoot runs Debian's systemd as PID 1 of a PID and mount namespace
// of its own (as in a container): its /run is $RUN, seen from outside too;
// its /tmp, /var/tmp and /sys/fs/cgroup are its own. The machine's
// /sys/fs/cgroup is a tmpfs whose superblock every namespace shares:
// systemd would add its hierarchies there and remount it read-only, and
// podman could no longer make its cgroups.
const systemdBoot = `set -e
mount --bind "$RUN" /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var/tmp
mount -t tmpfs tmpfs /sys/fs/cgroup
mkdir -p /run/systemd/system
printf '%s' "$UNIT" > /run/systemd/system/containerd.service
export container=oomguard-test
exec /lib/systemd/systemd --system --unit=containerd.service --log-target=null
`

// The DaemonSet's init container with restartRuntime on: install asks the
// node's systemd, over its private socket, to restart containerd.service,
// only when it changed the configuration. A real systemd does the restart.
func TestE2ERestartThroughSystemd(t *testing.T) {
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		t.Skip("no systemd binary on this machine")
	}
	run := t.TempDir()
	// systemd's cgroups go below one of the test's own, in a cgroup namespace:
	// on a systemd host its system.slice/containerd.service is the real one's.
	unified := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(unified + "/cgroup.procs"); err != nil {
		unified = "/sys/fs/cgroup"
	}
	cg := filepath.Join(unified, fmt.Sprintf("oomguard-systemd-test-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("cannot make a cgroup for systemd: %v", err)
	}
	t.Cleanup(func() { removeCgroupTree(cg) })
	boot := exec.Command("sh", "-c", `echo $$ > "$CG/cgroup.procs" && exec unshare --cgroup --pid --fork --mount --mount-proc --propagation private sh -c "$BOOT"`)
	boot.Env = append(os.Environ(), "UNIT="+systemdUnit, "RUN="+run, "CG="+cg, "BOOT="+systemdBoot)
	boot.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := boot.Start(); err != nil {
		t.Fatal(err)
	}
	// systemd is the child of unshare's fork: its namespaces are where to run.
	var pid1 string
	t.Cleanup(func() {
		if p, err := strconv.Atoi(pid1); err == nil {
			syscall.Kill(p, syscall.SIGKILL) // the namespace's PID 1: all of it
		}
		syscall.Kill(-boot.Process.Pid, syscall.SIGKILL)
		boot.Wait()
	})
	in := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"-t", pid1, "-m", "-p", "--"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(boot.Process.Pid), "task", strconv.Itoa(boot.Process.Pid), "children")); err == nil && len(strings.Fields(string(b))) > 0 {
			pid1 = strings.Fields(string(b))[0]
			if out, err := in("systemctl", "is-active", "containerd.service"); err == nil && out == "active" {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	mainPID := func() string {
		out, _ := in("systemctl", "show", "-p", "MainPID", "--value", "containerd.service")
		return out
	}
	before := mainPID()
	if before == "" || before == "0" {
		t.Fatalf("systemd did not start the stand-in containerd.service (MainPID %q)", before)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := t.TempDir()
	os.MkdirAll(filepath.Join(node, "etc/containerd"), 0o755)
	os.WriteFile(filepath.Join(node, install.ContainerdConfig), []byte(containerd17Config), 0o644)
	os.Symlink(run, filepath.Join(node, "run")) // systemd's /run
	// In systemd's PID namespace, as the DaemonSet's hostPID pod is: systemd
	// drops a connection whose peer it cannot see.
	installOnce := func() string {
		t.Helper()
		cmd := exec.Command("nsenter", "-t", pid1, "-p", "--", exe, "install", "--nri-only", "--root", node, "--restart-runtime")
		cmd.Env = append(os.Environ(), "OOMGUARD_TEST_MAIN=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install --restart-runtime: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := installOnce(); !strings.Contains(out, "restarted containerd.service (systemd job /org/freedesktop/systemd1/job/") {
		t.Fatalf("install did not restart containerd.service:\n%s", out)
	}
	var after string
	for i := 0; i < 50; i++ {
		if after = mainPID(); after != before && after != "0" && after != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after == before || after == "0" || after == "" {
		t.Fatalf("containerd.service's main PID is %s, before the restart %s: systemd did not restart it", after, before)
	}
	if out := installOnce(); !strings.Contains(out, "unchanged: no restart needed") || mainPID() != after {
		t.Fatalf("an unchanged node must not restart the runtime:\n%s", out)
	}
}

// removeCgroupTree removes the cgroups at and below dir, deepest first,
// once the killed namespace's processes have left them.
func removeCgroupTree(dir string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var dirs []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
		if _, err := os.Stat(dir); err != nil {
			return
		}
	}
}
