package scenarios

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/testbin"
	"github.com/oomguard/oomguard/test/vm"
)

// The cluster scenario: oomguard as users run it, through a real API server
// (cluster.go). On each runtime, in one boot: pods before oomguard, a
// Deployment on an old base image run on its patched image by the
// admission webhook (patchonuse.go; containerd 2.x and CRI-O), `helm
// install --wait` (the operator restarting the runtime when the chart's
// drop-in appears, as the chart's NOTES say), a VM-like pod created through
// the API, a RuntimeClass for a second handler, an in-place resize, another
// NRI plugin setting the same fields, `helm upgrade` with a changed rule,
// the NVIDIA toolkit's drop-in before and after oomguard (containerd), the
// hook mode (CRI-O), and uninstall leaving the runtime's configuration as
// it was, byte for byte; on containerd 2.x, pod start timed in four blocks
// around the install and the uninstall (podstart.go).

func clusterScenario() vm.Scenario {
	var variants []vm.Variant
	for _, rt := range vm.Selected(vm.Containerd2, vm.Containerd17, vm.CRIO, vm.Containerd21, vm.CRIO134) {
		variants = append(variants, vm.Variant{Name: rt.String(), Kernel: rt.Kernel, Setup: clusterSetup(rt), Drive: driveCluster(rt)})
	}
	return vm.Scenario{Name: "cluster", Title: "Installed with helm through a real API server", MemoryMB: vm.ClusterMem,
		Slow: true, Timeout: 25 * time.Minute, Variants: variants}
}

// chartImage is the image the chart names by default, which `make image`
// built and the node has already (pullPolicy IfNotPresent).
const chartImage = "ghcr.io/oomguard/oomguard:dev"

func clusterSetup(rt vm.Runtime) func(g *vm.Guest) error {
	return func(g *vm.Guest) error {
		hog, err := os.ReadFile(g.Bin("guest"))
		if err != nil {
			return err
		}
		if err := vm.WithRuntime(g, rt, map[string]runcbundle.ImageFile{
			"/usr/lib/systemd/systemd": {Data: []byte(watchInit), Mode: 0o755},
			"/sbin/init":               {Data: []byte(burstInit), Mode: 0o755},
			"/bin/hog":                 {Data: hog, Mode: 0o755},
			podStartInit:               {Data: []byte(podStartProgram), Mode: 0o755},
			podStartIdle:               {Data: []byte(podStartProgram), Mode: 0o755},
		}); err != nil {
			return err
		}
		if err := vm.WithClusterKubelet(g, rt); err != nil {
			return err
		}
		img, err := testbin.ReleaseImage(filepath.Join(g.Env().BuildDir, "image"), "amd64")
		if err != nil {
			return err
		}
		if err := g.Image(chartImage, img); err != nil {
			return err
		}
		if err := g.CopyFile("/usr/local/bin/nriother", g.Bin("nriother")); err != nil {
			return err
		}
		if rt.Component == vm.Containerd2.Component {
			ctk, err := g.Env().Component("nvidia", "nvidia-ctk")
			if err != nil {
				return err
			}
			if err := g.CopyWithLibs("/usr/local/bin/nvidia-ctk", ctk); err != nil {
				return err
			}
			un, err := g.Env().Component("nvidia", "nvidia-uninstall")
			if err != nil {
				return err
			}
			return g.CopyFile("/usr/local/bin/nvidia-uninstall", un)
		}
		return nil
	}
}

// burstInit is a VM-like pod's init whose runaways meet their limit one
// after another, a hundred times; the last names itself with escape
// sequences. The runaways run in a child cgroup of their own below the
// container's limit, as a VM's services do under systemd: the kernel
// chooses its victims there, so the init is never one of them (a privileged
// pod: its cgroup filesystem is writable). The init lives on.
const burstInit = `#!/bin/sh
set -e
cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
mkdir -p "$cg/init" "$cg/runaways"
echo $$ > "$cg/init/cgroup.procs"
echo +memory > "$cg/cgroup.subtree_control"
echo 24M > "$cg/runaways/memory.max"
set +e
runaway() { sh -c 'echo $$ > "$1" && exec /bin/hog' sh "$cg/runaways/cgroup.procs"; }
i=1
while [ $i -lt ` + "100" + ` ]; do runaway; i=$((i+1)); done
HOG_COMM="$(printf '\033[2J\033[31mevil')" runaway
exec sleep 2147483647
`

// clusterLib is the node-side shell the drive's scripts use.
const clusterLib = `
case $RUNTIME in
containerd) DROPIN=/etc/containerd/conf.d/10-oomguard-nri.toml ;;
crio) DROPIN=/etc/crio/crio.conf.d/10-oomguard-nri.conf ;;
esac
HOOKSD=/usr/share/containers/oci/hooks.d/oomguard.json
# plugin_log: what the chart's plugin containers logged, every pod of it.
plugin_log() {
	for f in /var/log/pods/kube-system_oomguard-nri-*/oomguard-nri/*.log; do
		[ -f "$f" ] && sed -n 's/^[^ ]* std[a-z]* [FP] //p' "$f"
	done
}
# plugin_workers: the pids of the plugin's workers (--supervise), a line each.
plugin_workers() {
	for d in /proc/[0-9]*; do
		{ tr '\0' '\n' < $d/environ; } 2>/dev/null | grep -qx OOMGUARD_NRI_WORKER=1 && echo ${d#/proc/}
	done
	true
}
# config_files: every file and directory of the runtimes' and oomguard's
# configuration on the node, files with their digest.
config_files() {
	for d in /etc/containerd /etc/crio /etc/nri /opt/nri /etc/containers/oci /usr/share/containers/oci /opt/oomguard /etc/oomguard; do
		find $d 2>/dev/null
	done | sort | while read -r f; do
		if [ -f "$f" ]; then echo "$(sha256sum < "$f" | cut -c1-16) $f"; else echo "dir $f"; fi
	done
}
# runtime_config: the runtime's whole configuration as it loads it.
runtime_config() {
	case $RUNTIME in
	containerd) containerd --config /etc/containerd/config.toml config dump 2>/dev/null ;;
	crio) crio --config /etc/crio/crio.conf config 2>/dev/null ;;
	esac
}
# nri_state: on or off, as the runtime's loaded configuration says.
nri_state() {
	case $RUNTIME in
	containerd) runtime_config | awk '/^ *\[/ { f = /nri\.v1\.nri/ } f && /^ *disable *=/ { print ($3 == "false") ? "on" : "off"; exit }' ;;
	# crio config comments out the values that are CRI-O's defaults (NRI is on by default).
	crio) runtime_config | awk '/^ *#? *enable_nri *=/ { sub(/^ *#? */, ""); print ($3 == "true") ? "on" : "off"; exit }' ;;
	esac
}
`

// clusterRun is one runtime's drive: what it found before oomguard, for the
// checks after.
type clusterRun struct {
	*vm.Cluster
	rt     vm.Runtime
	files  string                   // config_files before oomguard
	config string                   // runtime_config before oomguard
	starts map[string]time.Duration // pod start's samples and CPU, as the bench's figures (podstart.go)
	score  string                   // the VM-like rule's score in the chart's configuration now
}

func driveCluster(rt vm.Runtime) func(ctx context.Context, c *vm.Cluster) error {
	return func(ctx context.Context, c *vm.Cluster) error {
		r := &clusterRun{Cluster: c, rt: rt}
		// Pod start's blocks, once, on 2.x: the tier's time (a minute and more a boot).
		timed := func(name, block string) []vm.Step {
			if rt.Component != vm.Containerd2.Component {
				return nil
			}
			return []vm.Step{{Name: name, Run: r.podStarts(block)}}
		}
		steps := slices.Concat([]vm.Step{
			{Name: "node ready", Run: r.nodeReady},
			{Name: "pods before oomguard", Run: r.podsBefore},
		}, timed("pod start without oomguard, before the install", "before"))
		if rt.Component != vm.Containerd17.Component {
			steps = append(steps, vm.Step{Name: "patch on use", Run: r.patchOnUse})
		}
		steps = append(steps, vm.Step{Name: "helm install --wait", Run: r.install})
		steps = append(steps, timed("pod start with oomguard, after the install", "with-1")...)
		// containerd 1.7 has no validator: the plugin says so. The steps after run with it on.
		steps = append(steps, vm.Step{Name: "fail closed", Run: r.failClosed})
		steps = append(steps, vm.Step{Name: "OOM kills reported", Run: r.oomKills})
		if rt.Component == vm.Containerd2.Component { // the plugin's part alone: once
			steps = append(steps, vm.Step{Name: "kills whose records were overwritten", Run: r.lostKills})
		}
		steps = append(steps,
			vm.Step{Name: "runtime class", Run: r.runtimeClass},
			vm.Step{Name: "in-place resize", Run: r.resize},
			vm.Step{Name: "another NRI plugin", Run: r.otherPlugin},
		)
		if rt.Component != vm.Containerd17.Component { // the chart's upgrade: no runtime's part in it but the plugin's restart
			steps = append(steps, vm.Step{Name: "helm upgrade", Run: r.upgrade},
				vm.Step{Name: "score formulas", Run: r.scores})
		}
		steps = append(steps, vm.Step{Name: "rollout with surge", Run: r.surge},
			vm.Step{Name: "plugin killed", Run: r.crash})
		steps = append(steps, timed("pod start with oomguard, before the uninstall", "with-2")...)
		steps = append(steps, vm.Step{Name: "uninstall", Run: r.uninstall})
		steps = append(steps, timed("pod start without oomguard, after the uninstall", "after")...)
		if rt.Component == vm.Containerd2.Component { // once, on 2.x: the tier's time
			steps = append(steps, vm.Step{Name: "NVIDIA toolkit after oomguard, removed first", Run: r.nvidiaAfter},
				vm.Step{Name: "NVIDIA toolkit before oomguard, oomguard removed first", Run: r.nvidiaBefore})
		}
		if rt.Name == "crio" {
			steps = append(steps, vm.Step{Name: "hook mode", Run: r.hookMode})
		}
		if err := c.Steps(ctx, rt.Component, steps); err != nil {
			return err
		}
		if ps, ok := PodStartOf(r.starts); ok {
			c.Figure("pod start with oomguard", ps.With.Median)
			c.Figure("pod start without oomguard", ps.Without.Median)
			for _, n := range ps.Notes() {
				c.Note("%s: %s", rt.Component, n)
			}
		}
		return nil
	}
}

// sh runs the node-side script with the drive's helpers.
func (r *clusterRun) sh(ctx context.Context, script string) (string, error) {
	return r.Node.Run(ctx, clusterLib+script)
}

// clusterCPU is a Guaranteed pod's CPU: the node has one, and a pod's
// runc init runs under its quota (a tenth of a core doubles a start).
const clusterCPU = "150m"

// sysboxPod is a pod of RuntimeClass sysbox-runc whose command is no init:
// only the sysbox rule (runtime_handlers) matches it.
func sysboxPod(name string) vm.Pod {
	return vm.Pod{Name: name, Namespace: "default", Command: []string{"/bin/sleep", "2147483647"}, Memory: "32Mi", CPU: clusterCPU, RuntimeClass: "sysbox-runc"}
}

// vmPod is a VM-like Guaranteed pod: systemd as PID 1, the init-as-pid1 rule.
func vmPod(name string) vm.Pod {
	return vm.Pod{Name: name, Namespace: "default", Command: []string{"/usr/lib/systemd/systemd"}, Memory: "48Mi", CPU: clusterCPU}
}

func (r *clusterRun) nodeReady(ctx context.Context) error {
	if err := r.WaitNodeReady(ctx); err != nil {
		return err
	}
	var err error
	if r.files, err = r.sh(ctx, "config_files"); err != nil {
		return err
	}
	if r.config, err = r.sh(ctx, "runtime_config"); err != nil {
		return err
	}
	if s, _ := r.sh(ctx, "nri_state"); strings.TrimSpace(s) != "off" {
		return fmt.Errorf("NRI is %q before oomguard: the node must start with it off", s)
	}
	return nil
}

// podsBefore: a VM-like pod without oomguard, at kubelet's values; it runs
// on, for the plugin to fix when it starts.
func (r *clusterRun) podsBefore(ctx context.Context) error {
	if _, err := r.StartPod(ctx, vmPod("before-0")); err != nil {
		return err
	}
	return r.expect(ctx, "before-0", "-997", "1")
}

// remove deletes pods a step is done with: the node has one CPU, and each
// Guaranteed pod holds a tenth of it.
func (r *clusterRun) remove(ctx context.Context, pods ...string) error {
	_, err := r.Kubectl(ctx, append([]string{"-n", "default", "delete", "pod", "--wait=false"}, pods...)...)
	return err
}

// expect: pod's container is at score and group (either "" for any).
func (r *clusterRun) expect(ctx context.Context, pod, score, group string) error {
	m, err := r.Inspect(ctx, "default", pod, "main")
	if err != nil {
		return err
	}
	if (score != "" && m["oom_score_adj"] != score) || (group != "" && m["oom_group"] != group) {
		return fmt.Errorf("pod %s: %v, want oom_score_adj %s and memory.oom.group %s", pod, m, score, group)
	}
	return nil
}

// operator restarts the node's runtime once cond holds on the node, as the
// chart's NOTES tell an operator whose restartRuntime is false; it gives up
// when stop is closed.
func (r *clusterRun) operator(ctx context.Context, cond string, stop <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := r.sh(ctx, cond); err == nil {
				_, err := r.sh(ctx, "restart_runtime >/dev/null")
				done <- err
				return
			}
			select {
			case <-stop:
				done <- fmt.Errorf("the node never came to: %s", cond)
				return
			case <-ctx.Done():
				done <- ctx.Err()
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return done
}

// chart runs helm (install or upgrade, --wait) and waits for the rollout;
// with cond, the operator restarts the runtime meanwhile, when cond holds on
// the node. helm's --wait alone does not wait for one node: it waits for a
// DaemonSet's pods less its maxUnavailable (10%, rounded up: all of one).
func (r *clusterRun) chart(ctx context.Context, cond string, args ...string) error {
	stop := make(chan struct{})
	var restarted <-chan error
	if cond != "" {
		restarted = r.operator(ctx, cond, stop)
	}
	_, err := r.Helm(ctx, append(args, chartArgs...)...)
	if err == nil {
		err = r.rollout(ctx)
	}
	close(stop)
	if restarted != nil {
		if rerr := <-restarted; rerr != nil && err == nil {
			err = fmt.Errorf("restarting the runtime: %w", rerr)
		}
	}
	return err
}

// installChart installs the chart with values, the operator restarting the
// runtime when the drop-in appears (the hook mode needs no restart).
func (r *clusterRun) installChart(ctx context.Context, values ...string) error {
	r.score = "900" // the shipped configuration's
	cond := "[ -f $DROPIN ]"
	if slices.Contains(values, "mode=hook") {
		cond = ""
	}
	return r.chart(ctx, cond, append([]string{"install", "oomguard"}, values...)...)
}

// uninstallChart is docs/install-cluster.md's uninstall: the chart in uninstall mode,
// the operator restarting the runtime once the drop-in is gone (restart),
// then helm uninstall.
func (r *clusterRun) uninstallChart(ctx context.Context, restart bool) error {
	cond := ""
	if restart {
		cond = "[ ! -f $DROPIN ]"
	}
	if err := r.chart(ctx, cond, "upgrade", "oomguard", "--set", "mode=uninstall"); err != nil {
		return err
	}
	_, err := r.Helm(ctx, "uninstall", "oomguard", "--namespace", "kube-system", "--wait")
	return err
}

// nvidia runs the NVIDIA toolkit's command on the node (nvidia-ctk, or its
// installer's cleanup), then restarts the runtime.
func (r *clusterRun) nvidia(ctx context.Context, command string) error {
	_, err := r.sh(ctx, command+" >>/tmp/nvidia.log 2>&1 || { cat /tmp/nvidia.log; exit 1; }; restart_runtime >/dev/null")
	return err
}

const (
	nvidiaConfigure = "nvidia-ctk runtime configure --runtime=containerd"
	nvidiaRemove    = "nvidia-uninstall --runtime containerd"
)

// The VM's CNI is a no-op: only pods on the host's network start, the
// validation Job's among them.
var chartArgs = []string{"deploy/helm/oomguard", "--namespace", "kube-system", "--wait", "--timeout", "10m", "--set", "validateConfigHostNetwork=true"}

// install: `helm install --wait` completes on a node whose runtime has NRI
// off, restartRuntime false: the plugin waits for the runtime's restart,
// Ready, and says so (its gauge, /healthz, the node's condition for
// kubectl); the operator restarts the runtime when it suits them, and the
// plugin connects and says that. Then the first guarded pod.
func (r *clusterRun) install(ctx context.Context) error {
	start := time.Now()
	r.score = "900" // the shipped configuration's
	if _, err := r.Helm(ctx, append([]string{"install", "oomguard", "--set", "events.enabled=true", "--set", fmt.Sprintf("apiServer=https://%s:%d", vm.HostIP, r.Port)},
		chartArgs...)...); err != nil {
		return err
	}
	if err := r.rollout(ctx); err != nil {
		return err
	}
	r.Note("%s: helm install --wait with NRI off and restartRuntime=false: complete in %s, the runtime not restarted",
		r.rt.Component, time.Since(start).Round(time.Millisecond))
	if err := r.runtimeWait(ctx, true); err != nil {
		return err
	}
	if _, err := r.sh(ctx, "restart_runtime >/dev/null"); err != nil {
		return err
	}
	if err := r.runtimeWait(ctx, false); err != nil {
		return err
	}
	if s, _ := r.sh(ctx, "nri_state"); strings.TrimSpace(s) != "on" {
		return fmt.Errorf("NRI is %q after the install and the runtime's restart", s)
	}
	if _, err := r.StartPod(ctx, vmPod("vm-1")); err != nil {
		return err
	}
	r.Figure("helm install --wait to the first guarded pod running", time.Since(start))
	r.Note("%s: helm install --wait, then the operator's restart of the runtime, to the first guarded pod Ready: %s",
		r.rt.Component, time.Since(start).Round(time.Millisecond))
	if err := r.expect(ctx, "vm-1", "900", "0"); err != nil {
		return err
	}
	if err := r.logged(ctx, "default/vm-1", ` msg=decision `, ` phase=start `); err != nil {
		return err
	}
	// The pod that ran before was fixed when the plugin synchronized.
	return r.expect(ctx, "before-0", "900", "0")
}

// runtimeWait: while the runtime has not restarted since the install
// (waiting), the plugin is Ready and says it waits: /healthz, its gauge, the
// node's condition True; after, it is connected and the condition False.
func (r *clusterRun) runtimeWait(ctx context.Context, waiting bool) error {
	want := map[bool][3]string{
		true:  {"True RuntimeRestartPending", "oomguard_runtime_restart_pending 1", "waiting for " + r.rt.Name + ".service to restart"},
		false: {"False NRIConnected", "oomguard_runtime_restart_pending 0", "ok"},
	}[waiting]
	var cond, node string
	err := r.Poll(ctx, 2*time.Minute, "the plugin to say "+want[0], func() (bool, error) {
		out, err := r.Kubectl(ctx, "get", "node", vm.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="OOMGuardRuntimeRestartPending")].status} {.status.conditions[?(@.type=="OOMGuardRuntimeRestartPending")].reason}`)
		if err != nil {
			return false, err
		}
		cond = strings.TrimSpace(string(out))
		node, _ = r.sh(ctx, "wget -qO- http://"+vm.NodeIP+":9741/metrics | grep '^oomguard_runtime_restart_pending '; wget -qO- http://"+vm.NodeIP+":9741/healthz")
		return cond == want[0] && strings.Contains(node, want[1]) && strings.Contains(node, want[2]), nil
	})
	if err != nil {
		return fmt.Errorf("%w: the node's condition %q; on the node:\n%s", err, cond, node)
	}
	if waiting {
		msg, _ := r.Kubectl(ctx, "get", "node", vm.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="OOMGuardRuntimeRestartPending")].message}`)
		r.Note("%s: waiting for the runtime's restart: the plugin Ready, kubectl describe node says: %s", r.rt.Component, msg)
	}
	return nil
}

// logged: the plugin logged a line about pod holding every one of parts.
func (r *clusterRun) logged(ctx context.Context, pod string, parts ...string) error {
	out, err := r.sh(ctx, "plugin_log")
	if err != nil {
		return err
	}
	if hasLine(out, slices.Concat(parts, []string{" pod=" + pod + " "})...) {
		return nil
	}
	return fmt.Errorf("the plugin logged no line %q for %s; its log:\n%s", parts, pod, vm.TailLines(out, 30))
}

// hasLine: one line of out holds every one of parts.
func hasLine(out string, parts ...string) bool {
	return slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
		return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) })
	})
}

// lostKills: the kernel overwrites the records of kills the plugin could
// not read (its worker stopped while its runaways meet the limit, the log
// flooded over their records): once it reads on, the kills whose records
// were lost are told by their number from the container's count, and
// with those it read, every kill is told once.
func (r *clusterRun) lostKills(ctx context.Context) error {
	// The last step's pods gone first: grp-1's shell ignores SIGTERM as
	// PID 1 and its hog meets the limit again meanwhile, and a kill lost in
	// a container removed since may as well be outside every pod.
	if _, err := r.Kubectl(ctx, "-n", "default", "delete", "pod", "oom-1", "grp-1", "--ignore-not-found", "--grace-period=1", "--timeout=2m"); err != nil {
		return err
	}
	p := vm.Pod{Name: "lost-1", Namespace: "default", Command: []string{"/sbin/init"}, Memory: "32Mi", CPU: "none", Privileged: true}
	if _, err := r.StartPod(ctx, p); err != nil {
		return err
	}
	id, err := r.ContainerID(ctx, "default", "lost-1", "main")
	if err != nil {
		return err
	}
	stopped, err := r.sh(ctx, `set -e
cg=$(find /sys/fs/cgroup -type d -name "*`+id+`*" | head -1)
workers=$(plugin_workers)
kill -STOP $workers
echo on > /proc/sys/kernel/printk_devkmsg
trap 'kill -CONT $workers; echo ratelimit > /proc/sys/kernel/printk_devkmsg' EXIT
n=0
while [ "$n" -lt 20 ]; do sleep 0.2; n=$(sed -n 's/^oom_kill //p' $cg/memory.events); done
# 1.4 MB of records over a log of 1 MB (log_buf_len)
line=$(printf '%0900d' 0)
i=0
while [ $i -lt 1500 ]; do echo "oomguard-test flood $i $line" > /dev/kmsg; i=$((i+1)); done
echo $n`)
	if err != nil {
		return fmt.Errorf("stopping the plugin through 20 kills and flooding the log: %w", err)
	}
	// Each kill told once: one by one (as lost-1's, or unattributed with it
	// among the candidates) or by number (likewise).
	const summary = `cg=$(find /sys/fs/cgroup -type d -name "*%s*" | head -1)
plugin_log > /tmp/lost-all.log
kills() { sed -n 's/.* kills=\([0-9]*\) .*/\1/p' | awk '{ n += $1 } END { print n + 0 }'; }
grep -F 'msg="OOM kill"' /tmp/lost-all.log > /tmp/lost-each.log
grep -F 'msg="OOM kills whose kernel records were overwritten' /tmp/lost-all.log > /tmp/lost-number.log
echo "count $(sed -n 's/^oom_kill //p' $cg/memory.events)" \
	"own $(grep -c -F ' pod=default/lost-1 container=main ' /tmp/lost-each.log)" \
	"unsure $(grep -F 'attributed=false' /tmp/lost-each.log | grep -c -F 'default/lost-1/main')" \
	"lost $(grep -F ' pod=default/lost-1 container=main ' /tmp/lost-number.log | kills)" \
	"lost-unsure $(grep -F 'attributed=false' /tmp/lost-number.log | grep -F 'default/lost-1/main' | kills)" \
	"overwritten $(grep -c -F 'msg="kernel log records were overwritten' /tmp/lost-all.log)" \
	"$(wget -qO- http://` + vm.NodeIP + `:9741/metrics | grep '^oomguard_oom_kills_total{container="main",.*pod="lost-1"}' | awk '{ n += $2 } END { print "counted", n + 0 }')"
`
	var got string
	var count, own, unsure, lost, lostUnsure, overwritten, counted int
	err = r.Poll(ctx, 3*time.Minute, "lost-1's 100 kills told", func() (bool, error) {
		out, err := r.sh(ctx, fmt.Sprintf(summary, id))
		got = strings.TrimSpace(out)
		fmt.Sscanf(got, "count %d own %d unsure %d lost %d lost-unsure %d overwritten %d counted %d", &count, &own, &unsure, &lost, &lostUnsure, &overwritten, &counted)
		return err == nil && count == 100 && own+unsure+lost+lostUnsure >= 100, nil
	})
	if err != nil {
		// The reports not lost-1's own, how the rest were placed, and the plugin's other lines.
		log, _ := r.sh(ctx, `echo "lost-1's cgroups: $(find /sys/fs/cgroup -type d -name "*`+id+`*" | head -3 | tr '\n' ' ')"
grep -v -F ' pod=default/lost-1 container=main ' /tmp/lost-each.log | tail -10
sed -n 's/.* attributed_by=\([a-z]*\).*/\1/p' /tmp/lost-each.log | sort | uniq -c
grep -v -e msg=decision -e 'msg="OOM kill"' /tmp/lost-all.log | tail -15`)
		status, _ := r.Kubectl(ctx, "-n", "default", "get", "pod", "lost-1", "-o", "jsonpath={.status.containerStatuses[0]}")
		return fmt.Errorf("%w (stopped through %s kills): %s\n%s\nlost-1's status: %s", err, strings.TrimSpace(stopped), got, log, status)
	}
	// Told by number without their container only where a kill read was
	// placed nowhere: the last step's unsure kills, their pods gone, no
	// longer weigh.
	if overwritten == 0 || lost+lostUnsure == 0 || own+unsure+lost+lostUnsure != count || counted != own+lost || lostUnsure > 0 && unsure == 0 {
		return fmt.Errorf("lost-1's kills (stopped through %s kills), want records overwritten, some kills told by number (by container, unless one read was placed nowhere), each of 100 told once, those told as lost-1's counted: %s", strings.TrimSpace(stopped), got)
	}
	var events string
	err = r.Poll(ctx, time.Minute, "the Event on lost-1 counting its kills", func() (bool, error) {
		out, err := r.Kubectl(ctx, "-n", "default", "get", "events", "--field-selector", "involvedObject.name=lost-1,reason=OOMKilling", "-o", "jsonpath={.items[*].count}")
		events = strings.TrimSpace(string(out))
		return err == nil && events == strconv.Itoa(own+lost), nil
	})
	if err != nil {
		return fmt.Errorf("%w: the Event's count %q, want %d", err, events, own+lost)
	}
	r.Note("%s: the plugin stopped through %s kills and the log flooded over their records: %d kills told one by one as lost-1's, %d unattributed with it among the candidates; %d told by number as lost-1's, %d unattributed with it among the candidates; one Event of count %d",
		r.rt.Component, strings.TrimSpace(stopped), own, unsure, lost, lostUnsure, own+lost)
	return r.remove(ctx, "lost-1")
}

// oomKills: a guarded VM-like pod whose runaways meet its limit a hundred
// times: each kill is logged with the pod, counted under its labels, and
// one Event on the Pod counts them all; the init lives on; the escaped name
// is printed escaped. The report delays are noted.
func (r *clusterRun) oomKills(ctx context.Context) error {
	// A pod oomguard does not guard (kubelet's memory.oom.group 1) meets
	// its limit during the burst: the kernel kills its every process, and
	// rate-limits the records of the burst's kills around it.
	grp := vm.Pod{Name: "grp-1", Namespace: "default", Memory: "32Mi", CPU: "none",
		Command: []string{"/bin/sh", "-c", "sleep 2147483647 & sleep 2147483647 & sleep 8; HOG_COMM=grp-hog exec /bin/hog"}}
	if err := r.Apply(ctx, grp.Manifest()); err != nil {
		return err
	}
	// Burstable: its runaways are not held back by a CPU quota.
	p := vm.Pod{Name: "oom-1", Namespace: "default", Command: []string{"/sbin/init"}, Memory: "32Mi", CPU: "none", Privileged: true}
	if _, err := r.StartPod(ctx, p); err != nil {
		return err
	}
	id, err := r.ContainerID(ctx, "default", "oom-1", "main")
	if err != nil {
		return err
	}
	// The kernel's evidence: its count of the kills in oom-1's container
	// (memory.events, its child cgroups' included), and its "Killed
	// process" records of the runaways, named hog (the last one escaped).
	// Every kill in it is reported: as oom-1's, or unattributed with oom-1
	// among the candidates, one by one or, where the kernel overwrote the
	// records (a slow core), by number; none of grp-1's is oom-1's.
	const summary = `cg=$(find /sys/fs/cgroup -maxdepth 5 -type d -name "*%s*" ! -name "*conmon*" | head -1)
[ -n "$cg" ] || { echo gone; exit 0; }
plugin_log | grep -F 'msg="OOM kill"' > /tmp/all-kills.log
grep -F ' pod=default/oom-1 container=main ' /tmp/all-kills.log > /tmp/kills.log
grep -F 'attributed=false' /tmp/all-kills.log | grep -F 'default/oom-1/main' > /tmp/unsure.log
plugin_log | grep -F 'msg="OOM kills whose kernel records were overwritten' > /tmp/lost.log
kills() { sed -n 's/.* kills=\([0-9]*\) .*/\1/p' | awk '{ n += $1 } END { print n + 0 }'; }
# grp-1's records as seen so far: oom-1's burst may overwrite them in the kernel's log (1 MB) later.
dmesg | sed -n 's/.*Killed process \([0-9]*\) (\(grp-hog\|sleep\)).*/\1/p' >> /tmp/grp.seen
sort -u /tmp/grp.seen > /tmp/grp.pids
# Reports of records that may repeat one of grp-1's processes, whose pids no grp-1 process printed.
grep -F 'maybe_repeat_of=' /tmp/all-kills.log | while IFS= read -r l; do
	grep -q -x -F "$(printf '%%s\n' "$l" | sed -n 's/.* pid=\([0-9]*\) .*/\1/p')" /tmp/grp.pids && continue
	printf '%%s\n' "$l" | sed -n 's/.*maybe_repeat_of=\([0-9,]*\).*/\1/p' | tr ',' '\n' | grep -q -x -F -f /tmp/grp.pids && printf '%%s\n' "$l"
done > /tmp/grp-repeats.log
echo "count $(sed -n 's/^oom_kill //p' $cg/memory.events)" \
	"records $(dmesg | grep -c -E 'Killed process [0-9]+ \((hog|[^)]*evil)\)')" \
	"oom-1 $(wc -l < /tmp/kills.log) unsure $(wc -l < /tmp/unsure.log)" \
	"lost $(grep -F ' pod=default/oom-1 container=main ' /tmp/lost.log | kills)" \
	"lost-unsure $(grep -F 'attributed=false' /tmp/lost.log | grep -F 'default/oom-1/main' | kills)" \
	"grp-records $(wc -l < /tmp/grp.pids)" \
	"grp-1 $(grep -c -F ' pod=default/grp-1 container=main ' /tmp/all-kills.log)" \
	"either-unsure $(grep -F 'attributed=false' /tmp/all-kills.log | grep -c -e 'default/oom-1/main' -e 'default/grp-1/main')" \
	"grp-lost $(grep -F ' pod=default/grp-1 container=main ' /tmp/lost.log | kills)" \
	"either-lost-unsure $(grep -F 'attributed=false' /tmp/lost.log | grep -e 'default/oom-1/main' -e 'default/grp-1/main' | kills)" \
	"maybe $(wc -l < /tmp/grp-repeats.log)"
`
	var counts string
	var count, records, own, unsure, lost, lostUnsure, grpRecords, grpOwn, eitherUnsure, grpLost, eitherLostUnsure, maybe int
	// Each kill of either pod is told once: as its pod's, or unattributed
	// with it among the candidates (one line, whichever pod it was).
	// Records the kernel overwrote are gone from dmesg too: then grp-1
	// printed at least as many as are left. A record of grp-1's group kill
	// with a printed process's figures that /proc could no longer tell of
	// (its thread gone) is a kill of its own, maybe the kernel's repeat of
	// that process (counted twice): told at most once more each, its
	// maybe_repeat_of naming grp-1's processes (maybe).
	told := func() int { return own + grpOwn + eitherUnsure + lost + grpLost + eitherLostUnsure }
	made := func() int { return count + grpRecords }
	err = r.Poll(ctx, 5*time.Minute, "oom-1's 100 OOM kills and grp-1's group kill made and reported", func() (bool, error) {
		out, err := r.sh(ctx, fmt.Sprintf(summary, id))
		counts = strings.TrimSpace(out)
		if err != nil {
			return false, nil
		}
		if counts == "gone" {
			// Its init died (restartPolicy Never): the burst is over, its count with it.
			status, _ := r.Kubectl(ctx, "-n", "default", "get", "pod", "oom-1", "-o", "jsonpath={.status.containerStatuses[0]}")
			return false, fmt.Errorf("oom-1's container is gone, its init dead: %s", status)
		}
		fmt.Sscanf(counts, "count %d records %d oom-1 %d unsure %d lost %d lost-unsure %d grp-records %d grp-1 %d either-unsure %d grp-lost %d either-lost-unsure %d maybe %d",
			&count, &records, &own, &unsure, &lost, &lostUnsure, &grpRecords, &grpOwn, &eitherUnsure, &grpLost, &eitherLostUnsure, &maybe)
		return count >= 100 && grpRecords > 0 && told() >= made(), nil
	})
	if err != nil {
		// Where the kills went: the kernel's records, the plugin's reports by pod and how it attributed them.
		log, _ := r.sh(ctx, `echo "the kernel's Killed process records: $(dmesg | grep -c 'Killed process')"
dmesg | grep 'Killed process' | sed 's/ total-vm.*//' | tail -5
echo "reports by pod, attributed by:"; sed -n 's/.* pod=\([^ ]*\) .* attributed_by=\([a-z]*\).*/\1 \2/p' /tmp/all-kills.log | sort | uniq -c
echo "unattributed: $(grep -c attributed=false /tmp/all-kills.log)"
plugin_log | grep -v -e msg=decision -e 'msg="OOM kill"' | tail -15
plugin_log | grep -F 'msg="OOM kill"' | tail -5`)
		return fmt.Errorf("%w: %q\n%s", err, counts, log)
	}
	// A runaway's record the plugin told of neither way, with the records
	// around it: a "Killed process" line names no cgroup, so the kernel's
	// count is what the step holds the plugin to; a record beyond it is
	// noted with its neighbours, for the reader to place.
	if records != count {
		unmatched, _ := r.sh(ctx, `dmesg | sed -n 's/^\[ *\([0-9.]*\)\] .*Killed process \([0-9]*\) (\(hog\|[^)]*evil\)).*/\2 \1/p' > /tmp/records.pids
sed -n 's/.* pid=\([0-9]*\) .*/\1/p' /tmp/kills.log /tmp/unsure.log > /tmp/reported.pids
awk 'NR == FNR { r[$1] = 1; next } !($1 in r)' /tmp/reported.pids /tmp/records.pids | head -3 | while read -r pid at; do
	echo "pid $pid at $at, not told:"; dmesg | grep -B3 -A1 -F "Killed process $pid " | sed 's/ total-vm:[^ ]*//'
done`)
		r.Note("%s: oom-1: %d runaways' records in the kernel's log against its count of %d; %s", r.rt.Component, records, count, strings.TrimSpace(unmatched))
	}
	if lostAny := lost+grpLost+eitherLostUnsure > 0; own+lost > count || told() > made()+maybe && !lostAny {
		return fmt.Errorf("the kills the kernel made, %d in oom-1 (its count) and %d of grp-1's processes printed (and %d records that may repeat one), told %d times (want each once): %s",
			count, grpRecords, maybe, told(), counts)
	}
	out, err := r.sh(ctx, `grep -c 'container_kept_running=true' /tmp/kills.log
grep -c 'command=\\x1b\[2J\\x1b\[31mevil ' /tmp/kills.log /tmp/unsure.log | awk -F: '{ n += $2 } END { print n }'
if grep -q "$(printf '\033')" /var/log/pods/kube-system_oomguard-nri-*/oomguard-nri/*.log; then echo raw; else echo escaped; fi
wget -qO- http://`+vm.NodeIP+`:9741/metrics | grep '^oomguard_oom_kills_total{container="main",.*pod="oom-1"}' | awk '{ n += $2 } END { print "counted", n + 0 }'
sed -n 's/.* reported_after=\([^ ]*\).*/\1/p' /tmp/kills.log | tr '\n' ' '; echo
sed -n 's/.* kind=\([a-z]*\) .*/\1/p' /tmp/kills.log | sort | uniq -c | tr '\n' ' '; echo
grep -v -E ' command=(hog|\\x1b[^ ]*evil) ' /tmp/kills.log | head -3
grep -F ' pod=default/grp-1 ' /tmp/all-kills.log | grep -v -E ' command=(grp-hog|sh|sleep) ' | grep -v -x -F -f /tmp/grp-repeats.log | head -3
grep -F ' pod=default/grp-1 ' /tmp/all-kills.log | grep -c oom_group_member=true
true`)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	evil := len(lines) > 1 && (lines[1] == "1" || lines[1] == "0" && lost+lostUnsure > 0) // its record may be among those lost
	if len(lines) < 7 || lines[0] != strconv.Itoa(own) || !evil || lines[2] != "escaped" || lines[3] != "counted "+strconv.Itoa(own+lost) {
		return fmt.Errorf("the plugin's reports of the kills in oom-1 (%s; group off, escaped name, raw bytes, counter, delays, kinds):\n%s", counts, out)
	}
	if wrong := strings.Join(lines[6:len(lines)-1], "\n"); strings.TrimSpace(wrong) != "" {
		return fmt.Errorf("kills reported in the wrong pod:\n%s", wrong)
	}
	var events string
	err = r.Poll(ctx, time.Minute, "the Event on oom-1 counting its kills", func() (bool, error) {
		out, err := r.Kubectl(ctx, "-n", "default", "get", "events", "--field-selector", "involvedObject.name=oom-1,reason=OOMKilling",
			"-o", "jsonpath={range .items[*]}{.count} {.involvedObject.uid} {.involvedObject.fieldPath} {.type}{\"\\n\"}{end}")
		events = strings.TrimSpace(string(out))
		return err == nil && strings.HasPrefix(events, strconv.Itoa(own+lost)+" "), nil
	})
	uid, _ := r.Kubectl(ctx, "-n", "default", "get", "pod", "oom-1", "-o", "jsonpath={.metadata.uid}")
	if f := strings.Fields(events); err != nil || len(f) != 4 || f[1] != string(uid) || f[2] != "spec.containers{main}" || f[3] != "Warning" || strings.Contains(events, "\n") {
		return fmt.Errorf("the Event: %q, want one Warning of count %d on pod %s's container main", events, own+lost, uid)
	}
	var lags []time.Duration
	for _, f := range strings.Fields(lines[4]) {
		if d, err := time.ParseDuration(f); err == nil {
			lags = append(lags, d)
		}
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
		r.Figure("OOM kill report p50", p50)
		r.Figure("OOM kill report p99", p99)
		r.Note("%s: %d OOM kills in oom-1 by the kernel's count (%d records left in its log) beside a group kill of %d processes in grp-1: %d attributed to oom-1 (kinds: %s), %d unattributed with it among the candidates, none to another pod; %d of grp-1's attributed to it, %s as its group's, %d records told as kills of their own that may repeat one of its processes; records overwritten unread: %d kills told as oom-1's, %d with it among the candidates; one Event of count %d; reported after the kernel's record p50 %s, p99 %s (goal ≤ 1 s)",
			r.rt.Component, count, records, grpRecords, own, strings.TrimSpace(lines[5]), unsure, grpOwn, lines[len(lines)-1], maybe, lost, lostUnsure, own+lost, p50, p99)
	}
	if err := r.expect(ctx, "oom-1", "900", "0"); err != nil {
		return fmt.Errorf("the init must outlive its runaways: %w", err)
	}
	return r.remove(ctx, "oom-1", "grp-1")
}

// runtimeClass: a pod of RuntimeClass sysbox-runc (the runtimes' second
// handler) whose command is no init is matched by the sysbox rule.
func (r *clusterRun) runtimeClass(ctx context.Context) error {
	if err := r.Apply(ctx, "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: sysbox-runc\nhandler: sysbox-runc\n"); err != nil {
		return err
	}
	if _, err := r.StartPod(ctx, sysboxPod("sysbox-1")); err != nil {
		return err
	}
	if err := r.expect(ctx, "sysbox-1", "900", "0"); err != nil {
		return err
	}
	if err := r.logged(ctx, "default/sysbox-1", "msg=decision", " rule=sysbox "); err != nil {
		return err
	}
	return r.remove(ctx, "sysbox-1")
}

// resize: vm-1's memory resized in place through the API; kubelet re-sends
// the container's resources to the runtime; the container keeps its score
// and group 0. What the plugin saw of it is noted.
func (r *clusterRun) resize(ctx context.Context) error {
	patch := `{"spec":{"containers":[{"name":"main","resources":{"requests":{"memory":"64Mi"},"limits":{"memory":"64Mi"}}}]}}`
	if _, err := r.Kubectl(ctx, "-n", "default", "patch", "pod", "vm-1", "--subresource", "resize", "--patch", patch); err != nil {
		return err
	}
	var m map[string]string
	err := r.Poll(ctx, 2*time.Minute, "the resize to reach the container", func() (bool, error) {
		var err error
		m, err = r.Inspect(ctx, "default", "vm-1", "main")
		return err == nil && m["memory_max"] == "67108864", nil
	})
	if err != nil {
		st, _ := r.Kubectl(ctx, "-n", "default", "get", "pod", "vm-1", "-o", "jsonpath={.status.conditions} {.status.containerStatuses[0].resources}")
		return fmt.Errorf("%w: container %v, pod status %s", err, m, st)
	}
	// The plugin sets the group again after the runtime's update: give it
	// the moment an update takes.
	err = r.Poll(ctx, 30*time.Second, "vm-1 at 900 and group 0 after its resize", func() (bool, error) {
		return r.expect(ctx, "vm-1", "900", "0") == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", err, r.expect(ctx, "vm-1", "900", "0"))
	}
	out, _ := r.sh(ctx, "plugin_log | grep ' pod=default/vm-1 ' | grep -v 'msg=decision' | tail -4")
	r.Note("%s: after the resize the plugin logged: %s", r.rt.Component, cmp.Or(strings.TrimSpace(out), "nothing (no update reached it, and nothing drifted)"))
	return nil
}

// otherPlugin: another NRI plugin (index 05: it runs before oomguard) sets
// the score and memory.oom.group oomguard sets for the pods bearing its
// label: the pod starts (NRI refuses a container whose field two plugins
// set; oomguard sets none through NRI), and oomguard's rule is what the
// VM-like pod runs with. Two such plugins would fail the pod whatever
// oomguard did; the order against oomguard's is the unit tests'
// (TestAnotherPluginSettingTheSameFields, indexes 05 and 95).
func (r *clusterRun) otherPlugin(ctx context.Context) error {
	if _, err := r.sh(ctx, "nriother --idx 05 >>/tmp/nriother.log 2>&1 & echo $! > /run/nriother.pid; sleep 2; kill -0 $(cat /run/nriother.pid)"); err != nil {
		return fmt.Errorf("the other plugin did not stay connected: %w", err)
	}
	p := vmPod("other-1")
	p.Labels = map[string]string{"oomguard.test/other": "claim"}
	_, err := r.StartPod(ctx, p)
	if _, kerr := r.sh(ctx, "kill $(cat /run/nriother.pid); sleep 1"); err == nil && kerr != nil {
		err = kerr
	}
	if err != nil {
		return err
	}
	if err := r.expect(ctx, p.Name, "900", "0"); err != nil {
		return err
	}
	if out, _ := r.sh(ctx, "grep -c msg=set /tmp/nriother.log"); strings.TrimSpace(out) != "1" {
		l, _ := r.sh(ctx, "cat /tmp/nriother.log")
		return fmt.Errorf("the other plugin set %s containers, want 1: %s", strings.TrimSpace(out), l)
	}
	return r.remove(ctx, p.Name)
}

// upgrade: `helm upgrade --reuse-values` with a changed rule (the
// operator's way: nothing else changes); the validation Job passes
// it, the plugin's pod is not rolled, and the running plugin reads the
// ConfigMap's volume again: a new VM-like pod gets the new score. Then the
// ConfigMap edited past the chart into a configuration that does not
// validate (as an operator's kubectl edit would): the plugin keeps the one
// in force and says so (a log line, oomguard_config_valid 0, not Ready);
// `helm upgrade` with that configuration fails at its validation, the
// DaemonSet untouched; the chart's configuration put back, all is well.
func (r *clusterRun) upgrade(ctx context.Context) error {
	shipped, err := os.ReadFile(filepath.Join(r.Env.RepoDir, "deploy/helm/oomguard/files/config.toml"))
	if err != nil {
		return err
	}
	re := regexp.MustCompile(`(?s)(name = "init-as-pid1"\s*\noom_score_adj = )900`)
	if !re.Match(shipped) {
		return fmt.Errorf("the shipped config has no init-as-pid1 rule at 900")
	}
	good, bad := filepath.Join(r.Dir(), "config-850.toml"), filepath.Join(r.Dir(), "config-bad.toml")
	changed := re.ReplaceAll(shipped, []byte("${1}850"))
	if err := os.WriteFile(good, changed, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(bad, re.ReplaceAll(shipped, []byte("${1}9000")), 0o644); err != nil {
		return err
	}
	pods := func() string {
		out, _ := r.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node-agent", "-o", "name")
		return strings.TrimSpace(string(out))
	}
	before := pods()
	if err := r.chart(ctx, "", "upgrade", "oomguard", "--reuse-values", "--set-file", "config="+good); err != nil {
		return err
	}
	if after := pods(); after != before {
		why, _ := r.Kubectl(ctx, "-n", "kube-system", "get", "events,controllerrevisions", "--sort-by=.metadata.creationTimestamp")
		return fmt.Errorf("a changed configuration rolled the plugin's pod: %q before, %q after; what happened in kube-system:\n%s", before, after, why)
	}
	hash := config.Hash(changed)
	if err := r.pluginSays(ctx, `msg="configuration reloaded"`, "hash="+hash); err != nil {
		return err
	}
	r.score = "850"
	if err := r.guardsAgain(ctx, "vm-2"); err != nil {
		return err
	}

	b, _ := os.ReadFile(bad)
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{"config.toml": string(b)}})
	if _, err := r.Kubectl(ctx, "-n", "kube-system", "patch", "configmap", "oomguard-config", "--type=merge", "-p", string(patch)); err != nil {
		return err
	}
	if err := r.pluginSays(ctx, `msg="configuration changed but invalid; keeping the one in force"`, "in_force="+hash); err != nil {
		return err
	}
	if out, err := r.sh(ctx, "wget -qO- http://"+vm.NodeIP+":9741/metrics | grep -E '^oomguard_config_(valid|info)'"); err != nil ||
		!strings.Contains(out, "oomguard_config_valid 0") || !strings.Contains(out, `hash="`+hash+`"`) {
		return fmt.Errorf("the plugin's metrics with an invalid configuration: %v\n%s", err, out)
	}
	if err := r.Poll(ctx, time.Minute, "the plugin's pod not Ready", func() (bool, error) {
		out, err := r.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node-agent", "-o",
			`jsonpath={.items[0].status.containerStatuses[?(@.name=="oomguard-nri")].ready}`)
		return err == nil && strings.TrimSpace(string(out)) == "false", nil
	}); err != nil {
		return err
	}
	if err := r.guardsAgain(ctx, "vm-2b"); err != nil { // the rules in force still guard
		return err
	}
	if out, err := r.Helm(ctx, append([]string{"upgrade", "oomguard", "--reuse-values", "--set-file", "config=" + bad}, chartArgs...)...); err == nil ||
		!strings.Contains(string(out), "oomguard-validate-config") {
		return fmt.Errorf("helm upgrade with an invalid configuration: %v, want the validation Job to fail it\n%s", err, out)
	}
	if after := pods(); after != before {
		return fmt.Errorf("a configuration that failed validation rolled the plugin's pod: %q before, %q after", before, after)
	}
	if err := r.chart(ctx, "", "upgrade", "oomguard", "--reuse-values", "--set-file", "config="+good); err != nil {
		return err
	}
	return r.Poll(ctx, 3*time.Minute, "the plugin Ready again", func() (bool, error) {
		out, err := r.sh(ctx, "wget -qO- http://"+vm.NodeIP+":9741/healthz")
		return err == nil && strings.TrimSpace(out) == "ok", nil
	})
}

// pluginSays waits (kubelet's ConfigMap sync, then the plugin's reload
// interval) for a plugin log line holding every one of parts.
func (r *clusterRun) pluginSays(ctx context.Context, parts ...string) error {
	var out string
	err := r.Poll(ctx, 3*time.Minute, fmt.Sprintf("the plugin to log %q", parts), func() (bool, error) {
		var err error
		out, err = r.sh(ctx, "plugin_log")
		return err == nil && hasLine(out, parts...), nil
	})
	if err != nil {
		return fmt.Errorf("%w; its log:\n%s", err, vm.TailLines(out, 20))
	}
	return nil
}

// nvidiaAfter: the NVIDIA toolkit configures containerd (its drop-in and
// imports line) while oomguard is installed; after the runtime's restart NRI
// is on and the toolkit's runtime loaded. The toolkit removed first leaves
// NRI on and oomguard guarding.
func (r *clusterRun) nvidiaAfter(ctx context.Context) error {
	if err := r.installChart(ctx); err != nil {
		return err
	}
	if err := r.nvidia(ctx, nvidiaConfigure); err != nil {
		return err
	}
	if err := r.nodeState(ctx, "on", true); err != nil {
		return err
	}
	if err := r.guardsAgain(ctx, "vm-3"); err != nil {
		return err
	}
	if err := r.nvidia(ctx, nvidiaRemove); err != nil {
		return err
	}
	if err := r.nodeState(ctx, "on", false); err != nil {
		return err
	}
	if err := r.guardsAgain(ctx, "vm-4"); err != nil {
		return err
	}
	if err := r.uninstallChart(ctx, true); err != nil {
		return err
	}
	return r.restored(ctx, false)
}

// guardsAgain: once the plugin is back after a restart, a new VM-like pod
// is guarded; the pod is removed after.
func (r *clusterRun) guardsAgain(ctx context.Context, name string) error {
	if _, err := r.StartPod(ctx, vmPod(name)); err != nil {
		return err
	}
	err := r.Poll(ctx, time.Minute, name+" guarded", func() (bool, error) {
		return r.expect(ctx, name, r.score, "0") == nil, nil
	})
	if err != nil {
		return err
	}
	return r.remove(ctx, name)
}

// rollout waits for the chart's DaemonSet to be rolled out on the node, as
// an operator watches it: kubectl rollout status.
func (r *clusterRun) rollout(ctx context.Context) error {
	_, err := r.Kubectl(ctx, "-n", "kube-system", "rollout", "status", "daemonset/oomguard-nri", "--timeout=10m")
	return err
}

// nodeState: NRI as want in the runtime's loaded configuration, and the
// NVIDIA runtime in it or not.
func (r *clusterRun) nodeState(ctx context.Context, nri string, nvidia bool) error {
	if s, _ := r.sh(ctx, "nri_state"); strings.TrimSpace(s) != nri {
		return fmt.Errorf("NRI is %q, want %s", strings.TrimSpace(s), nri)
	}
	cfg, err := r.sh(ctx, "runtime_config")
	if err != nil {
		return err
	}
	if has := strings.Contains(cfg, "runtimes.nvidia]"); has != nvidia {
		return fmt.Errorf("the NVIDIA runtime loaded: %v, want %v", has, nvidia)
	}
	return nil
}

// uninstall: the chart in uninstall mode (the operator restarting the
// runtime when the drop-in is gone), then helm uninstall: the runtime's
// configuration is byte for byte what it was, and the pods that ran keep
// running.
func (r *clusterRun) uninstall(ctx context.Context) error {
	if err := r.uninstallChart(ctx, true); err != nil {
		return err
	}
	return r.restored(ctx, true)
}

// restored: the node's configuration is as before oomguard: byte for byte
// (files), or as the runtime loads it (exact false: another tool rewrote a
// file oomguard had changed, which oomguard then leaves as it is).
func (r *clusterRun) restored(ctx context.Context, exact bool) error {
	files, err := r.sh(ctx, "config_files")
	if err != nil {
		return err
	}
	if strings.Contains(files, "oomguard-nri.") || strings.Contains(files, "nri-install.json") || strings.Contains(files, "/opt/oomguard") {
		return fmt.Errorf("oomguard's files are left after the uninstall:\n%s", files)
	}
	if exact && files != r.files {
		return fmt.Errorf("the configuration files differ from before oomguard:\nbefore:\n%s\nafter:\n%s", r.files, files)
	}
	cfg, err := r.sh(ctx, "runtime_config")
	if err != nil {
		return err
	}
	if d := lineDiff(r.config, cfg, exact); d != "" {
		return fmt.Errorf("the runtime's loaded configuration differs from before oomguard:\n%s", d)
	}
	if s, _ := r.sh(ctx, "nri_state"); strings.TrimSpace(s) != "off" {
		return fmt.Errorf("NRI is %q after the uninstall", s)
	}
	_, err = r.Inspect(ctx, "default", "vm-1", "main")
	return err
}

// lineDiff lists the lines only one of a and b has; all false leaves out
// containerd's list of the files it imported (another tool's import line
// left behind imports nothing).
func lineDiff(a, b string, all bool) string {
	keep := func(l string) bool { return all || !strings.HasPrefix(strings.TrimSpace(l), "imports") }
	al, bl := slices.DeleteFunc(strings.Split(a, "\n"), func(l string) bool { return !keep(l) }),
		slices.DeleteFunc(strings.Split(b, "\n"), func(l string) bool { return !keep(l) })
	var out []string
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// nvidiaBefore: the toolkit first, then oomguard; oomguard uninstalled
// first leaves NRI off and the toolkit's runtime loaded; the toolkit
// removed after it leaves the runtime as it loaded before both.
func (r *clusterRun) nvidiaBefore(ctx context.Context) error {
	if err := r.nvidia(ctx, nvidiaConfigure); err != nil {
		return err
	}
	if err := r.installChart(ctx); err != nil {
		return err
	}
	if err := r.nodeState(ctx, "on", true); err != nil {
		return err
	}
	if err := r.guardsAgain(ctx, "vm-5"); err != nil {
		return err
	}
	if err := r.uninstallChart(ctx, true); err != nil {
		return err
	}
	if err := r.nodeState(ctx, "off", true); err != nil {
		return err
	}
	if err := r.nvidia(ctx, nvidiaRemove); err != nil {
		return err
	}
	return r.restored(ctx, false)
}

// hookMode (CRI-O): the chart's hook mode puts the hook where CRI-O reads
// it, without a restart; a VM-like pod and a pod of RuntimeClass
// sysbox-runc are guarded by it; uninstall leaves the node as it was.
func (r *clusterRun) hookMode(ctx context.Context) error {
	if err := r.installChart(ctx, "--set", "mode=hook"); err != nil {
		return err
	}
	if _, err := r.sh(ctx, "[ -f $HOOKSD ]"); err != nil {
		return fmt.Errorf("the chart's hook mode put no hook in %s", "/usr/share/containers/oci/hooks.d")
	}
	if _, err := r.StartPod(ctx, vmPod("hook-vm")); err != nil {
		return err
	}
	if err := r.expect(ctx, "hook-vm", "900", "0"); err != nil {
		return err
	}
	if err := r.remove(ctx, "hook-vm"); err != nil {
		return err
	}
	if _, err := r.StartPod(ctx, sysboxPod("hook-sysbox")); err != nil {
		return err
	}
	if err := r.expect(ctx, "hook-sysbox", "900", "0"); err != nil {
		log, _ := r.sh(ctx, "tail -5 /var/log/oomguard-hook.log")
		return fmt.Errorf("%w; the hook's log:\n%s", err, log)
	}
	if err := r.uninstallChart(ctx, false); err != nil { // nothing for the runtime to read again
		return err
	}
	return r.restored(ctx, true)
}
