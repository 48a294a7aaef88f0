package scenarios

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/oomguard/oomguard/test/vm"
)

// Fail closed, through the API: the chart with failClosed.enabled (install
// --fail-closed turns the runtime's NRI validator on; the admission
// policies mark each pod of a namespace labelled oomguard.io/fail-closed),
// then oomguard taken off the node (its DaemonSet's pod leaves). A probe
// created there meanwhile must not start; one in another namespace starts
// as usual; once oomguard is back the first starts, at the rule's score.

const guardedNS = "guarded"

func (r *clusterRun) failClosed(ctx context.Context) error {
	// The operator restarts the runtime for the drop-in that turns the validator on.
	if err := r.chart(ctx, "grep -q default_validator $DROPIN", "upgrade", "oomguard", "--reuse-values", "--set", "failClosed.enabled=true"); err != nil {
		return err
	}
	if _, err := r.Kubectl(ctx, "create", "namespace", guardedNS); err != nil {
		return err
	}
	defer r.Kubectl(ctx, "delete", "namespace", guardedNS, "--wait=false")
	if _, err := r.Kubectl(ctx, "label", "namespace", guardedNS, "oomguard.io/fail-closed=true"); err != nil {
		return err
	}
	if !validates(r.rt) {
		return r.cannotFailClosed(ctx)
	}
	if err := r.pluginSays(ctx, `msg="failing closed`, "runtime="); err != nil {
		return err
	}

	// Away: the DaemonSet's pod leaves the node.
	away := `{"spec":{"template":{"spec":{"nodeSelector":{"oomguard-e2e/away":"true"}}}}}`
	if _, err := r.Kubectl(ctx, "-n", "kube-system", "patch", "daemonset", "oomguard-nri", "--type=merge", "-p", away); err != nil {
		return err
	}
	var left string
	err := r.Poll(ctx, 2*time.Minute, "the plugin gone from the node", func() (bool, error) {
		out, err := r.sh(ctx, "plugin_workers")
		left = strings.TrimSpace(out)
		return err == nil && left == "", err
	})
	if err != nil {
		return fmt.Errorf("%w: workers left: %q", err, left)
	}
	gone := time.Now()
	held, free := probePod("held", "fail-closed"), probePod("free", "fail-closed")
	held.Namespace = guardedNS
	for _, p := range []string{held.Manifest(), free.Manifest()} {
		if err := r.Apply(ctx, p); err != nil {
			return err
		}
	}
	if err := r.WaitReady(ctx, "default", "free"); err != nil {
		return fmt.Errorf("a pod outside the namespaces that fail closed must start while oomguard is away: %w", err)
	}
	if got, err := r.firstLine(ctx, "default", "free"); err != nil || got == probeScore {
		return fmt.Errorf("the pod outside started at %q (%v), want kubelet's score: nothing guarded it", got, err)
	}
	// The held pod waits, its container refused by the runtime's validator.
	var waiting string
	err = r.Poll(ctx, time.Minute, "the held pod refused by the validator", func() (bool, error) {
		out, _ := r.Kubectl(ctx, "-n", guardedNS, "get", "pod", "held", "-o", `jsonpath={.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message} running={.status.containerStatuses[0].state.running}`)
		waiting = string(out)
		if strings.Contains(waiting, "running=map") {
			return false, fmt.Errorf("the held pod runs while oomguard is away: %s", waiting)
		}
		return strings.Contains(waiting, `required plugin "oomguard" not present`), nil
	})
	if err != nil {
		return err
	}
	time.Sleep(10 * time.Second) // kubelet retries; the runtime keeps refusing
	if out, _ := r.Kubectl(ctx, "-n", guardedNS, "get", "pod", "held", "-o", `jsonpath={.status.containerStatuses[0].state.running}`); len(out) > 0 {
		return fmt.Errorf("the held pod started while oomguard was away: %s", out)
	}
	r.Note("%s: fail closed: oomguard away, a pod of namespace %s waited (%s); one elsewhere started as usual", r.rt, guardedNS, strings.TrimSuffix(strings.TrimSpace(waiting), " running="))

	// Back: the pod starts, at the rule's score.
	if _, err := r.Kubectl(ctx, "-n", "kube-system", "patch", "daemonset", "oomguard-nri", "--type=json",
		"-p", `[{"op":"remove","path":"/spec/template/spec/nodeSelector/oomguard-e2e~1away"}]`); err != nil {
		return err
	}
	if err := r.rollout(ctx); err != nil {
		return err
	}
	back := time.Now()
	if err := r.WaitReady(ctx, guardedNS, "held"); err != nil {
		return err
	}
	started := time.Now()
	got, err := r.firstLine(ctx, guardedNS, "held")
	if err != nil {
		return err
	}
	r.remove(ctx, "free")
	r.Note("%s: fail closed: oomguard away %s; the held pod started %s after it was back, at %s (the rule's %s): 0 of 1 started unguarded",
		r.rt, back.Sub(gone).Round(time.Second), started.Sub(back).Round(time.Second), got, probeScore)
	r.Figure("fail closed: start after oomguard is back", started.Sub(back))
	if got != probeScore {
		return fmt.Errorf("the held pod started at %s, want the rule's %s", got, probeScore)
	}
	return nil
}

// validates: the runtime release has NRI's default validator (containerd
// 2.2, CRI-O 1.34 and later).
func validates(rt vm.Runtime) bool {
	var major, minor int
	fmt.Sscanf(rt.Version, "%d.%d", &major, &minor)
	since := map[string][2]int{"containerd": {2, 2}, "crio": {1, 34}}[rt.Name]
	return major > since[0] || major == since[0] && minor >= since[1]
}

// cannotFailClosed: containerd before 2.2 has no NRI validator; it loads the
// drop-in, the plugin says it cannot fail closed, and a pod of the labelled
// namespace starts as before, guarded while oomguard is there.
func (r *clusterRun) cannotFailClosed(ctx context.Context) error {
	if err := r.pluginSays(ctx, `msg="cannot fail closed`, "runtime="+r.rt.Name, "version="); err != nil {
		return err
	}
	p := probePod("unvalidated", "fail-closed")
	p.Namespace = guardedNS
	if err := r.Apply(ctx, p.Manifest()); err != nil {
		return err
	}
	if err := r.WaitReady(ctx, guardedNS, p.Name); err != nil {
		return err
	}
	got, err := r.firstLine(ctx, guardedNS, p.Name)
	if err != nil {
		return err
	}
	if got != probeScore {
		return fmt.Errorf("a pod of the labelled namespace started at %s, want the rule's %s", got, probeScore)
	}
	r.Note("%s: fail closed asked for: the plugin says the runtime cannot; a pod of namespace %s started as before, at %s", r.rt, guardedNS, got)
	return nil
}
