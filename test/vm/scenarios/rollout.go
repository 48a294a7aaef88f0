package scenarios

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/oomguard/oomguard/test/vm"
)

// No container starts unguarded because oomguard was away: pods are
// created continuously (paced to what the node's one emulated core starts)
// while the chart's DaemonSet rolls
// (with surge: the new plugin connected before the old one leaves) and
// while the plugin's worker is killed with SIGKILL (its supervisor starts
// it again). Each probe pod's first process prints the score it started
// with, which is the rule's only when a plugin was there at its start.

// probeScore is what the probes' annotation asks for; kubelet gives the
// (Guaranteed) probe -997, and an annotation may only raise a score.
const probeScore = "777"

// Its memory leaves room for runc's init (16Mi did not, at times: "container
// init was OOM-killed", and the probe never started).
func probePod(name, set string) vm.Pod {
	return vm.Pod{Name: name, Namespace: "default", Memory: "48Mi", CPU: "20m",
		Annotations: map[string]string{"oomguard.io/oom-score-adj": probeScore},
		Labels:      map[string]string{"oomguard-e2e/probe": set},
		Command:     []string{"/bin/sh", "-c", "cat /proc/self/oom_score_adj; exec sleep 2147483647"}}
}

// The probes' pace: one emulated core starts a pod in seconds, and CRI-O's
// vfs storage copies the image for each, so a probe is created every
// probeEvery while fewer than probesInFlight are not yet read and removed,
// and at most maxProbes in all.
const (
	probeEvery     = 1500 * time.Millisecond
	probesInFlight = 4
	maxProbes      = 60
)

// probing creates probe pods of set, paced, until the returned stop is
// called; each is read (its first line: its start score) and removed as it
// runs. stop says how many started, and how many at another score than
// the rule's.
func (r *clusterRun) probing(ctx context.Context, set string) (stop func() (started, unguarded int, err error)) {
	done := make(chan struct{})
	slots := make(chan struct{}, probesInFlight)
	created := make(chan string, maxProbes)
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	go func() {
		defer close(created)
		for i := 0; i < maxProbes; i++ {
			select {
			case <-done:
				return
			case slots <- struct{}{}:
			}
			name := fmt.Sprintf("%s-%d", set, i)
			if err := r.Apply(ctx, probePod(name, set).Manifest()); err != nil {
				fail(err)
				return
			}
			created <- name
			select {
			case <-done:
				return
			case <-time.After(probeEvery):
			}
		}
	}()
	var unguarded []string
	var started int
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for name := range created {
			started++
			if err := r.WaitReady(ctx, "default", name); err != nil {
				fail(err)
			} else if got, err := r.firstLine(ctx, "default", name); err != nil {
				fail(err)
			} else if got != probeScore {
				unguarded = append(unguarded, name+" at "+got)
			}
			r.Kubectl(ctx, "-n", "default", "delete", "pod", name, "--wait=false")
			<-slots
		}
	}()
	return func() (int, int, error) {
		close(done)
		<-checked
		if len(unguarded) > 0 {
			r.Note("%s: %s: %d of %d probe pods started unguarded: %s", r.rt, set, len(unguarded), started, strings.Join(unguarded, ", "))
		}
		mu.Lock()
		defer mu.Unlock()
		return started, len(unguarded), firstErr
	}
}

// surge rolls the chart's DaemonSet (a new pod template) while probes
// start: with surge no probe starts unguarded.
func (r *clusterRun) surge(ctx context.Context) error {
	pods := func() string {
		out, _ := r.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node-agent", "-o", "name")
		return strings.TrimSpace(string(out))
	}
	before := pods()
	stop := r.probing(ctx, "surge")
	time.Sleep(3 * time.Second)
	start := time.Now()
	// A new pod template, as a new image makes one (the image here is the one the node has).
	if err := r.chart(ctx, "", "upgrade", "oomguard", "--reuse-values", "--set-string", "podAnnotations.oomguard-e2e/rollout="+fmt.Sprint(time.Now().Unix())); err != nil {
		stop()
		return err
	}
	rolled := time.Since(start)
	time.Sleep(3 * time.Second)
	started, unguarded, err := stop()
	if err != nil {
		return err
	}
	if after := pods(); after == before {
		return fmt.Errorf("the upgrade did not roll the plugin's pod (%s)", after)
	}
	logs, _ := r.sh(ctx, "plugin_log")
	if !strings.Contains(logs, "took the node's lock") {
		return fmt.Errorf("the new plugin never took the node's lock:\n%s", logs)
	}
	r.Note("%s: helm upgrade rolled the plugin with surge in %s: %d of %d pods created meanwhile started unguarded", r.rt, rolled.Round(time.Second), unguarded, started)
	if unguarded > 0 {
		return fmt.Errorf("%d of %d pods created during the rollout started unguarded", unguarded, started)
	}
	return nil
}

// crash kills the plugin's worker with SIGKILL while probes start: the
// supervisor starts it again at once; the window from the death to the
// new worker's Synchronize (which fixes what started meanwhile) is
// measured, and bounded.
func (r *clusterRun) crash(ctx context.Context) error {
	stop := r.probing(ctx, "crash")
	time.Sleep(3 * time.Second)
	out, err := r.sh(ctx, `for p in $(plugin_workers); do kill -9 $p && echo killed $p; done`)
	if err != nil || !strings.Contains(out, "killed") {
		stop()
		return fmt.Errorf("kill the plugin's worker: %v\n%s", err, out)
	}
	time.Sleep(5 * time.Second)
	started, unguarded, err := stop()
	if err != nil {
		return err
	}
	logs, err := r.sh(ctx, "plugin_log")
	if err != nil {
		return err
	}
	window, err := crashWindow(logs)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, logs)
	}
	restarts, _ := r.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node-agent", "-o",
		`jsonpath={.items[0].status.containerStatuses[?(@.name=="oomguard-nri")].restartCount}`)
	r.Note("%s: the plugin's worker killed (SIGKILL): its supervisor had it connected and synchronized again in %s (the container restarted %s times); %d of %d pods created meanwhile started unguarded, each fixed at that Synchronize",
		r.rt, window.Round(time.Millisecond), strings.TrimSpace(string(restarts)), unguarded, started)
	r.Figure("plugin crash: unguarded window", window)
	// The bound leaves room for one emulated core shared by two boots (2.4–2.9 s measured).
	if window > 10*time.Second {
		return fmt.Errorf("the worker was away %s after its death, want at most 10s", window)
	}
	return r.guardsAgain(ctx, "vm-crash")
}

// firstLine is what probe pod ns/name printed first, from its CRI log on
// the node (the API server reaches no kubelet here), once it is there.
func (r *clusterRun) firstLine(ctx context.Context, ns, name string) (string, error) {
	script := "for f in /var/log/pods/" + ns + "_" + name + "_*/main/*.log; do [ -f \"$f\" ] && sed -n 's/^[^ ]* std[a-z]* [FP] //p' \"$f\"; done | head -1"
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		out, err := r.sh(ctx, script)
		if err != nil {
			return "", fmt.Errorf("the log of %s: %w", name, err)
		}
		if line := strings.TrimSpace(out); line != "" || time.Now().After(deadline) {
			return line, nil
		}
	}
}

var logTime = regexp.MustCompile(`time=(\S+) .*msg=("the worker died; starting it again"|synchronized)`)

// crashWindow is the time from the worker's death (its supervisor's line)
// to the next Synchronize.
func crashWindow(logs string) (time.Duration, error) {
	var died time.Time
	for _, m := range logTime.FindAllStringSubmatch(logs, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(m[2], "died"):
			died = at
		case !died.IsZero():
			return at.Sub(died), nil
		}
	}
	return 0, fmt.Errorf("no worker death followed by a Synchronize in the plugin's log")
}
