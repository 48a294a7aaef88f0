//go:build e2e

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/install"
	"github.com/oomguard/oomguard/internal/restartstate"
	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/testbin"
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

// systemdNode is Debian's systemd booted with one unit, containerd.service:
// run is its /run, seen from outside too; in runs a command in its mount
// and PID namespaces; mainPID is the unit's main process, as systemd says.
type systemdNode struct {
	run, pid1 string
}

func (n *systemdNode) in(args ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"-t", n.pid1, "-m", "-p", "--"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (n *systemdNode) mainPID() string {
	out, _ := n.in("systemctl", "show", "-p", "MainPID", "--value", "containerd.service")
	return out
}

// waitRestarted waits until the unit's main process is another than before.
func (n *systemdNode) waitRestarted(t *testing.T, before string) string {
	t.Helper()
	var after string
	for i := 0; i < 100; i++ {
		if after = n.mainPID(); after != before && after != "0" && after != "" {
			return after
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("containerd.service's main PID is %s, before the restart %s: systemd did not restart it", after, before)
	return ""
}

// bootSystemd boots systemd with unit, in a PID and mount namespace of its
// own below a cgroup of the test's; prepare fills its /run first.
func bootSystemd(t *testing.T, unit string, prepare func(run string)) *systemdNode {
	t.Helper()
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		t.Skip("no systemd binary on this machine")
	}
	run := t.TempDir()
	if prepare != nil {
		prepare(run)
	}
	// systemd's cgroups go below one of the test's own, in a cgroup namespace:
	// on a systemd host its system.slice/containerd.service is the real one's.
	unified := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(unified + "/cgroup.procs"); err != nil {
		unified = "/sys/fs/cgroup"
	}
	cg := filepath.Join(unified, fmt.Sprintf("oomguard-systemd-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("cannot make a cgroup for systemd: %v", err)
	}
	t.Cleanup(func() { removeCgroupTree(cg) })
	boot := exec.Command("sh", "-c", `echo $$ > "$CG/cgroup.procs" && exec unshare --cgroup --pid --fork --mount --mount-proc --propagation private sh -c "$BOOT"`)
	boot.Env = append(os.Environ(), "UNIT="+unit, "RUN="+run, "CG="+cg, "BOOT="+systemdBoot)
	boot.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := boot.Start(); err != nil {
		t.Fatal(err)
	}
	n := &systemdNode{run: run}
	t.Cleanup(func() {
		if p, err := strconv.Atoi(n.pid1); err == nil {
			syscall.Kill(p, syscall.SIGKILL) // the namespace's PID 1: all of it
		}
		syscall.Kill(-boot.Process.Pid, syscall.SIGKILL)
		boot.Wait()
	})
	// systemd is the child of unshare's fork: its namespaces are where to run.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(boot.Process.Pid), "task", strconv.Itoa(boot.Process.Pid), "children")); err == nil && len(strings.Fields(string(b))) > 0 {
			n.pid1 = strings.Fields(string(b))[0]
			if out, err := n.in("systemctl", "is-active", "containerd.service"); err == nil && out == "active" {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if pid := n.mainPID(); pid == "" || pid == "0" {
		t.Fatalf("systemd did not start the stand-in containerd.service (MainPID %q)", pid)
	}
	return n
}

// The node's CLI with --restart-runtime: install asks the node's systemd,
// over its private socket, to restart containerd.service, only when it
// changed the configuration, and waits for the job's result. A real systemd
// does the restart.
func TestE2ERestartThroughSystemd(t *testing.T) {
	n := bootSystemd(t, systemdUnit, nil)
	before := n.mainPID()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := t.TempDir()
	os.MkdirAll(filepath.Join(node, "etc/containerd"), 0o755)
	os.WriteFile(filepath.Join(node, install.ContainerdConfig), []byte(nodeShape(t, "containerd-1.7-default", install.ContainerdConfig)), 0o644)
	os.Symlink(n.run, filepath.Join(node, "run")) // systemd's /run
	// In systemd's PID namespace, as the DaemonSet's hostPID pod is: systemd
	// drops a connection whose peer it cannot see.
	installOnce := func() (string, error) {
		cmd := exec.Command("nsenter", "-t", n.pid1, "-p", "--", exe, "install", "--nri-only", "--root", node, "--restart-runtime")
		cmd.Env = append(os.Environ(), "OOMGUARD_TEST_MAIN=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := installOnce(); err != nil || !strings.Contains(out, "restarted containerd.service (systemd job /org/freedesktop/systemd1/job/") {
		t.Fatalf("install did not restart containerd.service: %v\n%s", err, out)
	}
	after := n.waitRestarted(t, before)
	if out, err := installOnce(); err != nil || !strings.Contains(out, "unchanged: no restart needed") || n.mainPID() != after {
		t.Fatalf("an unchanged node must not restart the runtime: %v\n%s", err, out)
	}

	// A runtime that does not come back: the restart's job fails, and
	// install says so, with the unit's state, and fails.
	n.setUnit(t, failingUnit)
	os.Remove(filepath.Join(node, install.ContainerdDropIn))
	if out, err := installOnce(); err == nil || !strings.Contains(out, `restarting containerd.service ended "failed" (now failed/failed, result exit-code)`) {
		t.Fatalf("install with a restart that fails: %v, want it to fail saying how the job ended:\n%s", err, out)
	}
}

// setUnit replaces containerd.service's unit file.
func (n *systemdNode) setUnit(t *testing.T, unit string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(n.run, "systemd/system/containerd.service"), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := n.in("systemctl", "daemon-reload"); err != nil {
		t.Fatalf("daemon-reload: %v: %s", err, out)
	}
}

// failingUnit is a runtime that exits at once with an error, as containerd
// does with a configuration it refuses.
const failingUnit = `[Unit]
DefaultDependencies=no
[Service]
Type=oneshot
ExecStart=/bin/false
`

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

// standInUnit runs this test binary as the node's runtime (standInRuntime),
// its node's root at /run/node as systemd's namespace sees it.
const standInUnit = `[Unit]
DefaultDependencies=no
[Service]
Environment=OOMGUARD_TEST_RUNTIME=/run/node
ExecStart=/run/bin/containerd
`

// restartRuntime=true as the chart runs it: install leaves the runtime to
// restart; the plugin (the DaemonSet's container, in the node's PID
// namespace) waits, Ready, while another node holds the only restart slot
// (a Lease, through a real API server, with the chart's RBAC), then takes
// it, restarts the runtime through the node's real systemd, connects to the
// NRI the restarted runtime serves, and frees the slot; the node's
// condition says each state. A restart whose job fails keeps the slot, says
// why, and frees it once the operator fixed the node.
func TestE2ERestartPaced(t *testing.T) {
	repo, _ := filepath.Abs("../..")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := bootSystemd(t, standInUnit, func(run string) {
		bin, _ := os.ReadFile(exe)
		os.MkdirAll(filepath.Join(run, "bin"), 0o755)
		os.WriteFile(filepath.Join(run, "bin/containerd"), bin, 0o755)
		os.MkdirAll(filepath.Join(run, "node/etc/containerd"), 0o755)
		os.MkdirAll(filepath.Join(run, "node/var/run/nri"), 0o755)
		// NRI off, as containerd 1.7 has it.
		os.WriteFile(filepath.Join(run, "node", install.ContainerdConfig), []byte(strings.Replace(nodeShape(t, "containerd-2-default", install.ContainerdConfig), "disable = false", "disable = true", 1)), 0o644)
	})
	node := filepath.Join(n.run, "node")
	for name, target := range map[string]string{"proc": "/proc", "sys": "/sys", "dev": "/dev", "run": n.run} {
		os.Symlink(target, filepath.Join(node, name))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	helm := testbin.ComponentFor(t, "helm", "helm")
	cp := controlplane.ForTest(ctx, t, controlplane.Options{})
	kubectl := cp.KubectlFor(ctx, t)
	// What may not be there yet (polled): its error is an answer.
	maybe := func(args ...string) string {
		out, _ := cp.Kubectl(ctx, nil, args...)
		return strings.TrimSpace(string(out))
	}
	rbac, err := exec.Command(helm, "template", "gpu", filepath.Join(repo, "deploy", "helm", "oomguard"),
		"--namespace", "oomguard", "--set", "restartRuntime=true", "--show-only", "templates/serviceaccount.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	kubectl("apiVersion: v1\nkind: Namespace\nmetadata: {name: oomguard}\n---\n"+string(rbac), "apply", "-f", "-")
	dir := t.TempDir()
	token, ca, err := cp.NodeAgentFiles(ctx, "oomguard", "gpu-oomguard-nri", "node-a", dir)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state.json")
	// Another node restarts its runtime: it holds the only slot.
	kubectl(fmt.Sprintf(`apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: gpu-oomguard-restart-0, namespace: oomguard}
spec: {holderIdentity: node-x, leaseDurationSeconds: 3600, renewTime: "%s"}
`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")), "apply", "-f", "-")

	nsenter := func(args ...string) *exec.Cmd {
		cmd := exec.Command("nsenter", append([]string{"-t", n.pid1, "-p", "--", exe}, args...)...)
		cmd.Env = append(os.Environ(), "OOMGUARD_TEST_MAIN=1")
		return cmd
	}
	installNode := func() {
		t.Helper()
		out, err := nsenter("install", "--nri-only", "--root", node, "--state", state, "--proc-root", "/").CombinedOutput()
		if s, _ := restartstate.Read(state); err != nil || len(s.Pending) != 1 {
			t.Fatalf("install: %v, state %+v\n%s", err, s, out)
		}
	}
	metricsPort, _ := controlplane.FreePort()
	var logs syncbuf.Buffer
	stop := func(p *exec.Cmd) {
		syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		p.Wait()
	}
	startPlugin := func() *exec.Cmd {
		t.Helper()
		p := nsenter("--socket", filepath.Join(node, "var/run/nri/nri.sock"), "--root", node, "--metrics-address", fmt.Sprintf("127.0.0.1:%d", metricsPort),
			"--runtime-state", state, "--node-condition", "--restart-runtime", "--restart-slots", "oomguard/gpu-oomguard-restart", "--restart-max-at-once", "1",
			"--node-name", "node-a", "--api-server", fmt.Sprintf("https://127.0.0.1:%d", cp.Port), "--api-token-file", token, "--api-ca-file", ca)
		p.Stdout, p.Stderr = &logs, &logs
		p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // nsenter and the plugin it forks
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(p) })
		return p
	}

	scrape := func(path string) (int, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", metricsPort, path))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	condition := func() string {
		return maybe("get", "node", "node-a", "-o", `jsonpath={.status.conditions[?(@.type=="OOMGuardRuntimeRestartPending")].reason}`)
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 90 s; the plugin's log:\n%s", what, logs.String())
			}
		}
	}
	counted := func(result string) bool {
		_, m := scrape("/metrics")
		return strings.Contains(m, `oomguard_runtime_restarts_total{result="`+result+`"} 1`)
	}

	before := n.mainPID()
	installNode()
	p := startPlugin()
	eventually("Ready, waiting for the runtime's restart, the node's condition saying so", func() bool {
		code, body := scrape("/healthz")
		_, m := scrape("/metrics")
		return code == 200 && strings.Contains(body, "waiting for containerd.service to restart") &&
			strings.Contains(m, "oomguard_runtime_restart_pending 1") && condition() == "RuntimeRestartPending"
	})
	eventually("the plugin to find the slot held", func() bool { return strings.Contains(logs.String(), "every restart slot is held by another node") })
	if pid := n.mainPID(); pid != before {
		t.Fatalf("the runtime restarted (main PID %s, was %s) while another node held the only slot", pid, before)
	}
	kubectl("", "-n", "oomguard", "delete", "lease", "gpu-oomguard-restart-0") // that node is done
	eventually("the restart, NRI served, the slot freed", func() bool {
		code, body := scrape("/healthz")
		leases := maybe("-n", "oomguard", "get", "leases", "-o", "name")
		return code == 200 && body == "ok\n" && counted("success") && leases == "" && condition() == "NRIConnected"
	})
	n.waitRestarted(t, before)

	// A restart that fails frees the slot, for the other nodes, and says why.
	stop(p)
	n.setUnit(t, failingUnit)
	os.Remove(filepath.Join(node, install.ContainerdDropIn))
	installNode()
	p2 := startPlugin()
	eventually("a failed restart counted, said, its slot freed", func() bool {
		code, _ := scrape("/healthz")
		leases := maybe("-n", "oomguard", "get", "leases", "-o", "name")
		return code == 503 && counted("failure") && leases == "" && condition() == "RuntimeRestartFailed"
	})
	if !strings.Contains(logs.String(), `restarting containerd.service ended \"failed\"`) {
		t.Fatalf("the plugin's log does not say how the restart ended:\n%s", logs.String())
	}
	// The operator fixes the node: NRI is served again.
	n.setUnit(t, standInUnit)
	if out, err := n.in("systemctl", "restart", "containerd.service"); err != nil {
		t.Fatalf("systemctl restart: %v: %s", err, out)
	}
	eventually("the fixed node serves NRI", func() bool {
		code, _ := scrape("/healthz")
		leases := maybe("-n", "oomguard", "get", "leases", "-o", "name")
		return code == 200 && leases == "" && condition() == "NRIConnected"
	})

	// Stopped as kubelet stops a container: the condition says nothing
	// reports the node any more.
	syscall.Kill(-p2.Process.Pid, syscall.SIGTERM)
	p2.Wait()
	if got := condition(); got != "PluginStopped" {
		t.Fatalf("the condition's reason after the plugin stopped: %q; its log:\n%s", got, logs.String())
	}
}
