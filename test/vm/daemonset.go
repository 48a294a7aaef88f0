package vm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/oomguard/oomguard/test/runcbundle"
)

// The DaemonSet scenario: the chart as `helm template` renders it, run by a
// real kubelet as a static pod from the image `make image` built, on a node
// whose runtime has NRI off (containerd 1.7's default; 2.x and CRI-O
// configured so). The init container switches NRI on with a drop-in; the
// runtime is restarted as the chart's default leaves to the operator (with
// SIGTERM, as systemd stops it); the plugin connects, fixes the pod that ran
// before, and the next pod is created guarded. Then the chart in uninstall
// mode restores the node.

// Where the chart's configuration goes in the VM, and its pod's name.
const (
	chartConfigDir = "/etc/oomguard-chart"
	chartPodName   = "oomguard-nri"
)

var daemonsetScript = `plugin_log() {
	for f in /var/log/pods/kube-system_` + chartPodName + `-node_*/$1/*.log; do
		[ -f "$f" ] && sed -n 's/^[^ ]* std[a-z]* [FP] //p' "$f"
	done
}
case $RUNTIME in
containerd) conf=/etc/containerd/config.toml dropin=/etc/containerd/conf.d/10-oomguard-nri.toml ;;
crio) conf=/etc/crio/crio.conf dropin=/etc/crio/crio.conf.d/10-oomguard-nri.conf ;;
esac
case $VARIANT in *hook) dropin=/usr/share/containers/oci/hooks.d/oomguard.json main=oomguard-doctor ;; *) main=oomguard-nri ;; esac
cp $conf /tmp/config.boot
ip link set lo up # the plugin answers on the node's loopback
start_runtime
start_kubelet
add_pod before
wait_pod before
kubeletish inspect before before
add_pod ` + chartPodName + `
wait_pod ` + chartPodName + ` running "--container $main"
plugin_log install | sed 's/^/@@INSTALL /'
case $VARIANT in
*hook) ;; # CRI-O reads hooks.d at each creation
*)
	echo "@@RESULT nri_socket_before_restart=$([ -S /var/run/nri/nri.sock ] && echo yes || echo no)"
	# restartRuntime is off, the chart's default: the operator restarts the runtime.
	echo "@@RESULT restart=$RUNTIME at_ns=$(kubeletish now)"
	restart_runtime
	i=0; while ! plugin_log oomguard-nri | grep -q "msg=synchronized" && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
	echo "@@RESULT synchronized=$(plugin_log oomguard-nri | grep -c msg=synchronized) at_ns=$(kubeletish now)"
	# Ready as kubelet's probe sees it, for 3 s on end: on this starved VM
	# CRI-O (2 s request timeout) has dropped the plugin just after its
	# first Synchronize; it reconnects, but a pod created meanwhile waits
	# for the verifier.
	i=0; ok=0
	while [ $ok -lt 30 ] && [ $i -lt 1200 ]; do
		if [ "$(wget -qO- http://127.0.0.1:9464/healthz 2>/dev/null)" = ok ]; then ok=$((ok+1)); else ok=0; fi
		sleep 0.1; i=$((i+1))
	done
	kubeletish inspect before before-restart
	;;
esac
add_pod idle
wait_pod idle
kubeletish inspect idle idle
case $VARIANT in
*hook) ;;
*)
	echo "@@RESULT healthz=$(wget -qO- http://127.0.0.1:9464/healthz 2>&1 | head -c 40 | tr ' \n' '__')"
	wget -qO- http://127.0.0.1:9464/metrics 2>/dev/null | grep "^oomguard_build_info" | sed 's/^/@@METRICS /'
	plugin_log oomguard-nri | sed 's/^/@@PLUGIN /'
	;;
esac
# Uninstall: the chart in mode=uninstall replaces the pod, as a rollout would.
cp /pods/uninstall.yaml /etc/kubernetes/.u.yaml && mv /etc/kubernetes/.u.yaml /etc/kubernetes/manifests/` + chartPodName + `.yaml
i=0; while [ -f $dropin ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done
sleep 1
plugin_log uninstall-nri | sed 's/^/@@UNINSTALL /'
plugin_log uninstall-hook | sed 's/^/@@UNINSTALL /'
echo "@@RESULT uninstalled=$([ -f $dropin ] && echo no || echo yes) config=$(cmp -s $conf /tmp/config.boot && echo restored || echo changed) manifests=$(ls /etc/oomguard/*-install.json 2>/dev/null | wc -l) hook=$([ -e /opt/oomguard/bin/oomguard-hook ] && echo left || echo removed)"
kubeletish pod before --until running >/dev/null && kubeletish inspect before before-end
report
`

func daemonsetScenario() Scenario {
	var variants []Variant
	for _, rt := range []Runtime{Containerd17, Containerd2, CRIO} {
		variants = append(variants, Variant{Name: rt.Component, Setup: daemonsetSetup(rt), Check: daemonsetChecked})
	}
	variants = append(variants, Variant{Name: "crio-hook", Setup: daemonsetSetup(CRIO, "--set", "mode=hook"), Check: daemonsetHookChecked})
	return Scenario{Name: "daemonset", Title: "The Helm chart's DaemonSet pod through a real kubelet",
		MemoryMB: kubeNodeMB, Script: daemonsetScript, Slow: true, Timeout: 10 * time.Minute, Variants: variants}
}

func daemonsetSetup(rt Runtime, values ...string) func(g *Guest) error {
	return func(g *Guest) error { return chartNode(g, rt, values) }
}

func chartNode(g *Guest, rt Runtime, values []string) error {
	if err := WithRuntime(g, rt, map[string]runcbundle.ImageFile{
		"/usr/lib/systemd/systemd": {Data: []byte(watchInit), Mode: 0o755},
	}); err != nil {
		return err
	}
	if err := WithKubelet(g, rt); err != nil {
		return err
	}
	for _, p := range []Pod{
		{Name: "before", Namespace: "ml", Command: []string{"/usr/lib/systemd/systemd"}, Memory: "48Mi"},
		{Name: "idle", Namespace: "ml", Command: []string{"/usr/lib/systemd/systemd"}, Memory: "48Mi"},
	} {
		p.File(g)
	}
	install, ref, err := chartStaticPod(g, values...)
	if err != nil {
		return err
	}
	uninstall, _, err := chartStaticPod(g, "--set", "mode=uninstall")
	if err != nil {
		return err
	}
	g.File("/pods/"+chartPodName+".yaml", install, 0o644)
	g.File("/pods/uninstall.yaml", uninstall, 0o644)
	img, err := releaseImage(filepath.Join(filepath.Dir(g.env.Components), "image"), "amd64")
	if err != nil {
		return err
	}
	return g.Image(ref, img)
}

// chartStaticPod renders the chart with the real helm, as an operator
// would with these values, and makes it the static pod kubelet runs; it
// returns the pod's manifest and the image it names.
func chartStaticPod(g *Guest, values ...string) ([]byte, string, error) {
	helm, err := g.env.component("helm", "helm")
	if err != nil {
		return nil, "", err
	}
	conv, err := g.env.component("helm", "staticpod")
	if err != nil {
		return nil, "", err
	}
	tmp := filepath.Join(g.dir, "helm")
	cmd := exec.Command(helm, append([]string{"template", "oomguard", filepath.Join(g.env.RepoDir, "deploy/helm/oomguard"), "--namespace", "kube-system"}, values...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+tmp, "HELM_CONFIG_HOME="+tmp, "HELM_DATA_HOME="+tmp)
	rendered, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("helm template: %w", err)
	}
	out := filepath.Join(g.dir, "chart-config")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, "", err
	}
	cmd = exec.Command(conv, "--config-out", out, "--config-path", chartConfigDir)
	cmd.Stdin = bytes.NewReader(rendered)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pod, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("staticpod: %w: %s", err, stderr.String())
	}
	if err := g.CopyFile(chartConfigDir+"/config.toml", filepath.Join(out, "config.toml")); err != nil {
		return nil, "", err
	}
	_, rest, _ := strings.Cut(string(pod), "image: ")
	ref, _, _ := strings.Cut(rest, "\n")
	return pod, ref, nil
}

// releaseImage is arch's image of the OCI layout `make image` wrote.
func releaseImage(dir, arch string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (run make image)", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s has no linux/%s image (run make image)", dir, arch)
}

// daemonsetChecked: NRI was off until the init container's drop-in and the
// restart; the pod that ran before survived the restart and was fixed at
// Synchronize; the next one was created guarded; the plugin answered on the
// node; uninstall restored containerd's configuration.
func daemonsetChecked(r *Run) error {
	if m := r.Result("nri_socket_before_restart"); m == nil || m["nri_socket_before_restart"] != "no" {
		return fmt.Errorf("NRI must be off until containerd restarts: %v", m)
	}
	if !strings.Contains(r.Console, "@@INSTALL wrote /etc/containerd/conf.d/10-oomguard-nri.toml") &&
		!strings.Contains(r.Console, "@@INSTALL wrote /etc/crio/crio.conf.d/10-oomguard-nri.conf") {
		return fmt.Errorf("the init container did not write the NRI drop-in")
	}
	before, after := inspected(r, "before"), inspected(r, "before-restart")
	if before == nil || before["oom_score_adj"] != "-997" || before["oom_group"] != "1" {
		return fmt.Errorf("the pod before oomguard: %v, want kubelet's -997 and group 1", before)
	}
	if after == nil || after["pid"] != before["pid"] || after["state"] != "CONTAINER_RUNNING" {
		return fmt.Errorf("the pod that ran before did not survive containerd's restart: %v, before %v", after, before)
	}
	if after["oom_score_adj"] != "900" || after["oom_group"] != "0" {
		return fmt.Errorf("the pod that ran before was not fixed at Synchronize: %v", after)
	}
	if err := expectInspect(r, "idle", "900", "0"); err != nil {
		return err
	}
	if fixedAtStart(r, "idle") {
		return fmt.Errorf("the plugin had to fix the idle pod after start")
	}
	if h := r.Result("healthz"); h == nil || !strings.HasPrefix(h["healthz"], "ok") {
		return fmt.Errorf("/healthz on the node: %v", h)
	}
	if !strings.Contains(r.Console, "@@METRICS oomguard_build_info{") {
		return fmt.Errorf("/metrics on the node has no oomguard_build_info")
	}
	if err := uninstalled(r, before); err != nil {
		return err
	}
	if started, connected, ok := ChartTimes(r); ok {
		r.Notes = append(r.Notes, fmt.Sprintf("%s chart pod: static pod added → plugin container running %s; runtime restarted → plugin synchronized %s",
			r.Variant, started.Round(time.Millisecond), connected.Round(time.Millisecond)))
	}
	return nil
}

// uninstalled: the chart's uninstall mode left the node as it found it, and
// the pod that ran before running.
func uninstalled(r *Run, before map[string]string) error {
	if u := r.Result("uninstalled"); u == nil || u["uninstalled"] != "yes" || u["config"] != "restored" || u["manifests"] != "0" || u["hook"] != "removed" {
		return fmt.Errorf("the chart's uninstall mode did not restore the node: %v", u)
	}
	if end := inspected(r, "before-end"); end == nil || end["pid"] != before["pid"] {
		return fmt.Errorf("the pod that ran before did not survive the uninstall: %v", end)
	}
	return nil
}

// daemonsetHookChecked: the chart's hook mode put the hook on the node where
// CRI-O reads it, the next pod was created guarded (the one before keeps
// kubelet's score: a hook runs only at creation), and uninstall took it all.
func daemonsetHookChecked(r *Run) error {
	if !strings.Contains(r.Console, "@@INSTALL wrote /usr/share/containers/oci/hooks.d/oomguard.json") ||
		!strings.Contains(r.Console, "@@INSTALL wrote /opt/oomguard/bin/oomguard-hook") {
		return fmt.Errorf("the init container did not install the hook")
	}
	before := inspected(r, "before")
	if before == nil || before["oom_score_adj"] != "-997" {
		return fmt.Errorf("the pod before oomguard: %v, want kubelet's -997", before)
	}
	if err := expectInspect(r, "idle", "900", "0"); err != nil {
		return err
	}
	return uninstalled(r, before)
}

// ChartTimes is, in the daemonset scenario, how long the chart's static pod
// took from its manifest to the plugin's container running (its init
// container done), and the plugin from containerd's restart to synchronized.
func ChartTimes(r *Run) (started, connected time.Duration, ok bool) {
	ns := func(m map[string]string, key string) int64 {
		v, _ := strconv.ParseInt(m[key], 10, 64)
		return v
	}
	added, running := result(r, "added", chartPodName), podResult(r, chartPodName)
	restart, synced := r.Result("restart"), r.Result("synchronized")
	if added == nil || running == nil || restart == nil || synced == nil {
		return 0, 0, false
	}
	started = time.Duration(ns(running, "started_ns") - ns(added, "at_ns"))
	connected = time.Duration(ns(synced, "at_ns") - ns(restart, "at_ns"))
	return started, connected, started > 0 && connected > 0
}
