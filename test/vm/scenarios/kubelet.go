package scenarios

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/vm"
)

// The kubelet scenarios: a real kubelet, standalone, runs static pods on a
// real runtime in the VM, and sets them up as it does on every node —
// Guaranteed: oom_score_adj -997 and memory.oom.group 1. Both incidents run in
// one boot: the VM-like pod hits its limit (a cgroup OOM), then a Guaranteed
// pod whose limit is larger than what the node has left fills the node (a
// global OOM, as with the notes' 178 GiB limit on a 192 GiB node).

// kubeNodeMB is the VM's memory, and fillerLimit the filler pod's limit:
// more than the node has left once kubelet and the runtime run.
const (
	kubeNodeMB  = 1280
	fillerLimit = "1000Mi"
)

// kubeDaemons stand for the node's daemons: their loss is what takes a node down.
var kubeDaemons = []string{"sshd", "systemd-networkd", "rpcbind", "agetty"}

// watchInit is a VM-like pod that runs idle, and says what score it started
// at and, when that was kubelet's -997, how long until it was not.
const watchInit = `#!/bin/sh
read t0 _ < /proc/uptime
s0=$(cat /proc/self/oom_score_adj)
i=0
while [ "$s0" = -997 ] && [ "$(cat /proc/self/oom_score_adj)" = -997 ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done
read t1 _ < /proc/uptime
echo "@@RESULT watch=1 first=$s0 now=$(cat /proc/self/oom_score_adj) after_s=$(echo "$t1 $t0" | awk '{print $1-$2}')"
sleep 100000 &
sleep 100000 &
wait
`

// kubeScript installs oomguard as the variant says, starts the node, and
// runs both incidents through kubelet: first an idle VM-like pod, a pod that
// forges containerd's namespace key (CRI-O copies pod annotations into the
// spec) with a low score annotation, a process exec'd into the idle pod, and
// the doctor's view of the node.
var kubeScript = `# selectors: a pod per selector of the policy, through kubelet, each
# inspected, then all removed.
selectors() {
	for p in ` + selectorPodNames + `; do add_pod $p; done
	for p in ` + selectorPodNames + `; do wait_pod $p; kubeletish inspect $p $p; done
	rm -f /etc/kubernetes/manifests/sel-*.yaml
	for p in ` + selectorPodNames + `; do kubeletish pod $p --until gone >/dev/null; done
}
case $VARIANT in
report-only) oomguard-nri install | sed 's/^/@@INSTALL /' ;;
*nri-external*) oomguard-nri install --nri-only | sed 's/^/@@INSTALL /' ;;
*nri*) oomguard-nri install | sed 's/^/@@INSTALL /' ;;
*hook*) oomguard-hook install --hook-path /oomguard/bin/oomguard-hook | sed 's/^/@@INSTALL /' ;;
esac
start_runtime
case $VARIANT in *nri-external*) start_plugin ;; esac
start_daemons ` + "sshd systemd-networkd rpcbind agetty" + `
start_kubelet
add_pod idle
wait_pod idle
kubeletish inspect idle idle
add_pod forger
wait_pod forger
kubeletish inspect forger forger
kubeletish exec idle -- sleep 8 &
i=0; while ! p=$(pid_of "sleep 8") && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
echo "@@RESULT exec=started score=$(cat /proc/$p/oom_score_adj)"
sleep 4
echo "@@RESULT exec=later score=$(cat /proc/$p/oom_score_adj)"
case $VARIANT in without|report-only) ;; *) selectors ;; esac
doctor --daemons sshd,systemd-networkd,rpcbind,agetty
kubeletish resize idle
kubeletish inspect idle resized
pod_log idle
add_pod vm
wait_pod vm exited
pod_log vm
add_pod filler
wait_pod filler exited
check_daemons ` + "sshd systemd-networkd rpcbind agetty" + `
ip link set lo up 2>/dev/null || ifconfig lo up 2>/dev/null # a boot without a cluster has no network
wget -qO- http://127.0.0.1:9741/metrics 2>/dev/null | grep '^oomguard_node_' | sed 's/^/@@METRIC /'
report
`

// kubeSetup puts the node together: rt, kubelet, the static pods, the
// daemons' stand-ins; verifying every 2 s, so the VM need not wait a minute.
func kubeSetup(rt vm.Runtime) func(g *vm.Guest) error { return kubeSetupVerifying(rt, "2s", true) }

// reportOnlySetup is kubeSetup with a configuration of no rules: the
// plugin changes nothing and reports every OOM kill, its metrics on.
func reportOnlySetup(rt vm.Runtime) func(g *vm.Guest) error {
	return kubeSetupVerifying(rt, "2s", false)
}

// kubeSetupVerifying is kubeSetup with the plugin verifying every interval,
// with the shipped rules and the selectors' or none.
func kubeSetupVerifying(rt vm.Runtime, interval string, rules bool) func(g *vm.Guest) error {
	return func(g *vm.Guest) error {
		hog, err := os.ReadFile(g.Bin("guest"))
		if err != nil {
			return err
		}
		if err := vm.WithRuntime(g, rt, map[string]runcbundle.ImageFile{
			"/sbin/init":               {Data: []byte(vmLikeInit), Mode: 0o755},
			"/lib/systemd/systemd":     {Data: []byte(podInit), Mode: 0o755},
			"/usr/lib/systemd/systemd": {Data: []byte(watchInit), Mode: 0o755},
			"/bin/hog":                 {Data: hog, Mode: 0o755},
			"/bin/sel-cmd":             {Data: []byte("#!/bin/sh\nexec sleep 100000\n"), Mode: 0o755},
		}); err != nil {
			return err
		}
		if err := vm.WithKubelet(g, rt); err != nil {
			return err
		}
		for _, d := range kubeDaemons {
			if err := g.CopyFile("/daemons/"+d, g.Bin("guest")); err != nil {
				return err
			}
		}
		fast, err := vm.ShippedConfig(g.Env().RepoDir, interval)
		if err != nil {
			return err
		}
		if rules {
			fast = append(fast, selectorRules()...)
		} else {
			cfg, _, _ := strings.Cut(string(fast), "\n[[rule]]")
			fast = []byte(strings.Replace(cfg, `# metrics_address = "127.0.0.1:9741"`, `metrics_address = "127.0.0.1:9741"`, 1))
		}
		g.File("/etc/oomguard/config.toml", fast, 0o644)
		g.File(vm.GuestConfig, fast, 0o644)
		for _, p := range []vm.Pod{
			{Name: "idle", Namespace: "ml", Command: []string{"/usr/lib/systemd/systemd"}, Memory: "64Mi"},
			{Name: "forger", Namespace: "ml", Command: []string{"/usr/lib/systemd/systemd"}, Memory: "32Mi", Annotations: map[string]string{
				"io.kubernetes.cri.sandbox-namespace": "kube-system", "io.kubernetes.cri.sandbox-name": "coredns",
				"oomguard.io/oom-score-adj": "-1000"}},
			{Name: "vm", Namespace: "ml", Command: []string{"/sbin/init"}, Memory: "48Mi"},
			{Name: "filler", Namespace: "ml", Command: []string{"/lib/systemd/systemd"}, Memory: fillerLimit},
		} {
			p.File(g)
		}
		for _, sel := range selectors {
			sel.Pod.File(g)
		}
		return nil
	}
}

// kubeScenario is kubelet-RUNTIME-VERSION: the variants on rt's
// combination (its kernel and kubelet).
func kubeScenario(rt vm.Runtime, variants ...vm.Variant) vm.Scenario {
	for i := range variants {
		if variants[i].Setup == nil {
			variants[i].Setup = kubeSetup(rt)
		}
		variants[i].Kernel = rt.Kernel
	}
	return vm.Scenario{Name: "kubelet-" + rt.String(), Title: fmt.Sprintf("Through a real kubelet %s on %s, kernel %s", vm.KubeletVersion(rt.Kubelet), rt, rt.Kernel),
		MemoryMB: kubeNodeMB, Script: kubeScript, Variants: variants, Slow: true, Timeout: 12 * time.Minute}
}

// selector is a static pod that only its own rule matches, and that rule's
// [rule.match] body.
type selector struct {
	Pod   vm.Pod
	Match string
}

// selectors has a pod for each selector of the policy but the runtime
// handler. Their rules follow the shipped ones, the i-th giving 801+i: below
// the VM-like pods' 900, and the pods are gone before the incidents.
var selectors = func() []selector {
	pod := func(name string) vm.Pod {
		// Guaranteed (runc needs more than 16Mi), and matching no shipped rule.
		return vm.Pod{Name: name, Namespace: "sel", Command: []string{"/bin/sleep", "100000"}, Memory: "32Mi"}
	}
	ns, ctr, labels, annotations, qos, command, image :=
		pod("sel-namespace"), pod("sel-container"), pod("sel-labels"), pod("sel-annotations"), pod("sel-qos"), pod("sel-command"), pod("sel-image")
	ns.Namespace = "sel-ns"
	ctr.Container = "sel-ctr"
	labels.Labels = map[string]string{"oomguard.test/sel": "label"}
	annotations.Annotations = map[string]string{"oomguard.test/sel": "annotation"}
	qos.Memory = "" // BestEffort
	command.Command = []string{"/bin/sel-cmd"}
	image.Image = vm.SelectorImage
	return []selector{
		{ns, `namespaces = ["sel-ns"]`},
		{ctr, `containers = ["sel-ctr"]`},
		{labels, `pod_labels = { "oomguard.test/sel" = "label" }`},
		{annotations, `annotations = { "oomguard.test/sel" = "annotation" }`},
		{qos, `qos = ["BestEffort"]`},
		{command, `command = '(^|/)sel-cmd$'`},
		{image, `images = ["registry.example/oomguard/selector:*"]`},
	}
}()

// selectorScore is the score the i-th selector's rule gives.
func selectorScore(i int) string { return strconv.Itoa(801 + i) }

var selectorPodNames = func() string {
	var names []string
	for _, s := range selectors {
		names = append(names, s.Pod.Name)
	}
	return strings.Join(names, " ")
}()

// selectorRules are the selectors' rules, named as their pods.
func selectorRules() []byte {
	var b strings.Builder
	for i, s := range selectors {
		fmt.Fprintf(&b, "\n[[rule]]\nname = %q\noom_score_adj = %s\n[rule.match]\n%s\n", s.Pod.Name, selectorScore(i), s.Match)
	}
	return []byte(b.String())
}

// selectorsMatched: every selector pod got its rule's score. The hook sees
// only the container's spec, which does not hold the pod's labels (they are
// in the sandbox's): there that pod keeps kubelet's -997. The runtime
// handler selector is proven on containerd on the build host
// (nriplugin/containerd_e2e_test.go): a standalone kubelet cannot resolve a
// RuntimeClass.
func selectorsMatched(r *vm.Run, hook bool) error {
	var wrong []string
	for i, s := range selectors {
		want := selectorScore(i)
		if hook && s.Pod.Name == "sel-labels" {
			want = "-997"
		}
		if m := inspected(r, s.Pod.Name); m == nil || m["oom_score_adj"] != want {
			wrong = append(wrong, fmt.Sprintf("%s: %v, want %s", s.Pod.Name, m, want))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("selectors not matched as their rules say:\n  %s", strings.Join(wrong, "\n  "))
	}
	return nil
}

// kubeIncidents checks a boot with oomguard installed as by: "" (none),
// "nri", "nri-poststart" (the plugin on a runtime that ignores its score
// adjustment) or "hook". Without oomguard kubelet's settings stand, the
// VM-like pod dies whole and the node daemons die before the filler; with it,
// only the runaways die, a forged namespace buys nothing, every selector
// matches, and the doctor finds no group kill. An exec'd process ends at the
// guarded score only with "nri": the plugin puts the score in the spec (which
// exec uses); the hook changes the init's score only.
// resizedGroup is the group flag after a resize with the hook, which runs
// at create only: what the runtime makes of the update's unified values.
func kubeIncidents(r *vm.Run, by, resizedGroup string) error {
	guarded, execFixed := by != "", by == "nri"
	wantScore, wantGroup, wantDoctor := "-997", "1", "4"
	if guarded {
		wantScore, wantGroup, wantDoctor = "900", "0", "0"
	}
	for _, pod := range []string{"idle", "forger", "resized"} {
		want := wantGroup
		if pod == "resized" && by == "hook" {
			want = resizedGroup
		}
		if m := inspected(r, pod); m == nil || m["oom_score_adj"] != wantScore || m["oom_group"] != want {
			return fmt.Errorf("pod %s: %v, want oom_score_adj %s and memory.oom.group %s", pod, m, wantScore, want)
		}
	}
	if guarded {
		if err := selectorsMatched(r, by == "hook"); err != nil {
			return err
		}
	}
	if g := severity(r, "group-kill"); g != wantDoctor {
		return fmt.Errorf("the doctor's group-kill severity is %s, want %s", g, wantDoctor)
	}
	// The doctor found the runtime's CRI socket and names pods as operators do.
	if !strings.Contains(r.Console, "containers named by the runtime at unix:///run/") {
		return fmt.Errorf("the doctor did not name containers through the runtime's CRI")
	}
	if !guarded && !strings.Contains(r.Console, "ml/idle-node/main (pod ") {
		return fmt.Errorf("the doctor's report does not name the idle pod ml/idle-node/main")
	}
	if later := result(r, "exec", "later"); execFixed && later["score"] != "900" {
		return fmt.Errorf("a process exec'd into the guarded pod is at %s a few seconds later, want 900", later["score"])
	}
	vmPod := podResult(r, "vm")
	if guarded {
		if err := onlyRunawayDied(r); err != nil && r.Result("pid1") == nil {
			return fmt.Errorf("the VM-like pod's init must outlive its runaway: %v (pod %v)", err, vmPod)
		}
	} else if r.Result("pid1") != nil || vmPod["exit"] != "137" {
		return fmt.Errorf("without oomguard the VM-like pod must die whole (exit 137): pod %v, init %v", vmPod, r.Result("pid1"))
	}
	if by == "nri" {
		// Its container's limit, or its pod's (the same, and the pause
		// container's memory counts there too): the kernel says which.
		if err := killReported(r, "ml/vm-node", "", "container_kept_running=true"); err != nil {
			return err
		}
		if err := killReported(r, "ml/filler-node", "node", "model_predicted=true"); err != nil {
			return err
		}
	}
	dead := deadDaemons(r)
	if guarded && len(dead) > 0 {
		return fmt.Errorf("node daemons died: %v; the kernel killed %s", dead, vm.Names(r.KilledComms()))
	}
	if !guarded && len(dead) == 0 {
		return fmt.Errorf("no node daemon died (the kernel killed %s): the global OOM did not reproduce", vm.Names(r.KilledComms()))
	}
	return nil
}

// killReported: the plugin reported an OOM kill in pod of kind (its log
// line, with also), and how long after the kernel's record, which is noted.
func killReported(r *vm.Run, pod, kind, also string) error {
	l, ok := pluginLine(r, pod, `msg="OOM kill"`, " kind="+kind, also)
	if !ok {
		return fmt.Errorf("the plugin did not report the OOM kill in %s (kind %s)", pod, kind)
	}
	field := func(k string) string {
		_, v, _ := strings.Cut(l, " "+k+"=")
		v, _, _ = strings.Cut(v, " ")
		return v
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s/%s: the OOM kill in %s (kind %s) reported %s after the kernel's record",
		r.Scenario, r.Variant, pod, field("kind"), field("reported_after")))
	return nil
}

// pluginLine is the first line of the plugin's log (@@PLUGIN) about pod
// holding every one of parts.
func pluginLine(r *vm.Run, pod string, parts ...string) (string, bool) {
	for _, l := range strings.Split(r.Console, "\n") {
		if strings.Contains(l, "@@PLUGIN ") && strings.Contains(l, " pod="+pod+" ") &&
			!slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			return l, true
		}
	}
	return "", false
}

// result is the first "@@RESULT key=value …" line.
func result(r *vm.Run, key, value string) map[string]string {
	for _, m := range r.Results {
		if m[key] == value {
			return m
		}
	}
	return nil
}

// podResult is the pod's last "@@RESULT pod=NAME …" line.
func podResult(r *vm.Run, name string) map[string]string {
	var last map[string]string
	for _, m := range r.Results {
		if m["pod"] == name {
			last = m
		}
	}
	return last
}

// reportOnly: kubelet's values stand (the plugin runs with no rule): every node
// daemon the kernel killed is reported as one (its log line and counter),
// and each global OOM's victim is the one the doctor's model ranks first.
func reportOnly(r *vm.Run) error {
	if err := kubeIncidents(r, "", ""); err != nil {
		return err
	}
	dead := deadDaemons(r)
	var daemons, unpredicted []string
	for _, l := range strings.Split(r.Console, "\n") {
		if !strings.Contains(l, "@@PLUGIN ") || !strings.Contains(l, `msg="OOM kill"`) || !strings.Contains(l, " kind=node ") {
			continue
		}
		if strings.Contains(l, " node_daemon=true") {
			_, c, _ := strings.Cut(l, " command=")
			c, _, _ = strings.Cut(c, " ")
			daemons = append(daemons, c)
		}
		// A group's members (or who may be one) are not the kernel's choice.
		if !strings.Contains(l, " model_predicted=true") && !strings.Contains(l, " oom_group_member=true") && !strings.Contains(l, " oom_group_of=") {
			unpredicted = append(unpredicted, l)
		}
	}
	for _, d := range dead {
		if !slices.Contains(daemons, kernel.TaskComm(d)) {
			return fmt.Errorf("the kernel killed node daemon %s; the plugin reported node daemons %v", d, daemons)
		}
	}
	if len(unpredicted) > 0 {
		return fmt.Errorf("global OOM victims the doctor's model did not rank first:\n%s", strings.Join(unpredicted, "\n"))
	}
	want := fmt.Sprintf(`@@METRIC oomguard_node_daemon_oom_kills_total{kind="node"} %d`, len(daemons))
	if !strings.Contains(r.Console, want) {
		return fmt.Errorf("no %q in the plugin's metrics", want)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s/%s: node daemons killed in the global OOM, each reported as one and counted (%d), each victim the doctor's model's first",
		r.Scenario, r.Variant, len(daemons)))
	return nil
}

// guarded: as kubeIncidents, and the plugin set the idle pod's container
// before it started (StartContainer: the runtime's spec keeps kubelet's
// values, which oomguard never claims).
func guarded(r *vm.Run) error {
	if _, ok := pluginLine(r, "ml/idle-node", " msg=decision ", " phase=start "); !ok {
		return fmt.Errorf("the plugin did not set the idle pod's container before it started")
	}
	return kubeIncidents(r, "nri", "")
}

// hookGuarded: the hook on CRI-O. CRI-O up to 1.34 drops the unified
// values of a resize (toOCIResources), so the group flag stays as the hook
// left it; 1.36 applies them, and kubelet's update sets the group to 1
// again, which nothing runs to undo in hook mode (NRI's PostUpdateContainer
// does): measured, and documented as hook mode's limit.
func hookGuarded(rt vm.Runtime) func(r *vm.Run) error {
	group := "0"
	if rt.Version >= "1.36" {
		group = "1"
	}
	return func(r *vm.Run) error { return kubeIncidents(r, "hook", group) }
}

// execWatched: on containerd 1.7.25 with the verifier off (60 s), the idle
// pod was set before start and a process exec'd into it (which starts at the
// spec's -997) is at 900 moments later: only the exec watcher can have set it.
func execWatched(r *vm.Run) error {
	if _, ok := pluginLine(r, "ml/idle-node", " msg=decision ", " phase=start "); !ok {
		return fmt.Errorf("the plugin did not set the idle pod's container before it started")
	}
	if w := r.Result("watch"); w == nil || w["now"] != "900" {
		return fmt.Errorf("the idle pod's init: %v, want 900", w)
	}
	return kubeIncidents(r, "nri", "")
}

// PodStarts is how long each static pod of the incidents (not the selector
// pods, which start together, and only with oomguard) took from its manifest
// appearing to its container running, as the runtime reports its start.
func PodStarts(r *vm.Run) []time.Duration {
	var out []time.Duration
	for _, added := range r.Results {
		name := added["added"]
		if name == "" || strings.HasPrefix(name, "sel-") {
			continue
		}
		at, err1 := strconv.ParseInt(added["at_ns"], 10, 64)
		var pod map[string]string
		for _, m := range r.Results {
			if m["pod"] == name && m["started_ns"] != "" {
				pod = m
				break
			}
		}
		started, err2 := strconv.ParseInt(pod["started_ns"], 10, 64)
		if err1 != nil || err2 != nil || started <= at {
			continue
		}
		out = append(out, time.Duration(started-at))
	}
	return out
}

// PodStartTable compares, per kubelet scenario, the median pod start with
// oomguard-nri to the one without it: the plugin's end-to-end cost through
// a real kubelet and runtime (goal ≤ 1.05×). Few pods per boot, in a VM
// without KVM: a report, not an assertion.
func PodStartTable(starts map[string][]time.Duration) string {
	var b strings.Builder
	b.WriteString("pod start through kubelet (manifest to container running), median of each boot's pods:\n")
	for _, key := range slices.Sorted(maps.Keys(starts)) {
		scenario, variant, _ := strings.Cut(key, "/")
		// The baseline: the plugin with no rule, reporting kills only.
		const baseline = "report-only"
		base := starts[scenario+"/"+baseline]
		if variant == baseline || len(base) == 0 || len(starts[key]) == 0 {
			continue
		}
		with, without := median(starts[key]), median(base)
		ratio := float64(with) / float64(without)
		fmt.Fprintf(&b, "  %-28s %-18s %8s vs %8s %s: %.2f× (goal ≤ 1.05×)\n", scenario, variant,
			with.Round(time.Millisecond), without.Round(time.Millisecond), baseline, ratio)
	}
	return b.String()
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
