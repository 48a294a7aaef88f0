package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/restartstate"
	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/testbin"
)

func init() { sections = append(sections, section{"fleet", benchFleet}) }

// Sizes of the fleet section; smaller in a smoke run.
var (
	fleetNodes  = 50
	fleetPhase  = time.Minute
	fleetBurst  = 100 // containers killed at once on every node
	fleetTarget = 5000
)

// The chart's defaults the goals are judged against.
const (
	eventQPS, eventBurst         = 1.0, 25
	objectBurst, objectEvery     = 25, 5 * time.Minute
	fleetNS, fleetRelease        = "oomguard", "fleet"
	fleetAccount, fleetSlotLease = "fleet-oomguard-nri", "fleet-oomguard-restart"
)

// benchFleet runs N real oomguard-nri processes, each a node of its own
// (its NRI runtime, root, node name, and a token bound to its pod on its
// Node, as the chart's DaemonSet gets it), against the real kube-apiserver
// of the test control plane with the chart's RBAC and node-scoped policy,
// through a proxy that counts every request and can answer as an
// overloaded server does. Real OOM kills drive the storms: every node
// knows containers in the same memory cgroups of this host, so each kill
// is one on every node. Each phase prints requests per node per hour by
// verb and resource, and the projection to 5,000 nodes.
func benchFleet(int) (bool, error) {
	if os.Geteuid() != 0 {
		fmt.Println("fleet: needs root (memory cgroups, /dev/kmsg): skipped")
		return true, nil
	}
	if smoke {
		fleetNodes, fleetPhase, fleetBurst = 3, 3*time.Second, 12
	}
	plugin, err := built("oomguard-nri")
	if err != nil {
		return false, err
	}
	kubeBin, err := testbin.Component("kubernetes", "")
	if err != nil {
		return false, err
	}
	helm, err := testbin.Component("helm", "helm")
	if err != nil {
		return false, err
	}
	guest, err := testBinary("guest")
	if err != nil {
		return false, err
	}
	cfg, _ := filepath.Abs("deploy/config.toml")
	return withDir("fl", func(dir string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		cp, err := controlplane.Start(ctx, controlplane.Options{Bin: kubeBin, Dir: filepath.Join(dir, "cp")})
		if err != nil {
			return false, err
		}
		defer cp.Stop()
		rbac, err := exec.Command(helm, "template", fleetRelease, "deploy/helm/oomguard", "--namespace", fleetNS, "--set", "events.enabled=true",
			"--set", "restartRuntime=true", "--show-only", "templates/serviceaccount.yaml").Output()
		if err != nil {
			return false, fmt.Errorf("helm template: %w", err)
		}
		// The release's namespace, and the pods' (an Event lives in its object's).
		namespaces := "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + fleetNS + "}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n---\n"
		if out, err := cp.Kubectl(ctx, append([]byte(namespaces), rbac...), "apply", "-f", "-"); err != nil {
			return false, fmt.Errorf("the chart's RBAC: %w: %s", err, out)
		}

		// Memory cgroups every node's containers are in: a kill in one is a
		// kill in a container of each node.
		hog := filepath.Join(dir, "hog")
		if err := os.Symlink(guest, hog); err != nil {
			return false, err
		}
		var cgroups []string
		for j := range fleetBurst {
			cg, cleanup, err := benchMemcgNamed(fmt.Sprintf("oomguard-fleet-%d-%d", os.Getpid(), j), 16<<20)
			if err != nil {
				return false, err
			}
			defer cleanup()
			cgroups = append(cgroups, cg)
		}

		nodes := make([]*fleetNode, fleetNodes)
		tokens := map[string]string{}
		for i := range nodes {
			n := &fleetNode{name: fmt.Sprintf("fleet-%02d", i), dir: filepath.Join(dir, strconv.Itoa(i))}
			if err := n.prepare(ctx, cp, cgroups); err != nil {
				return false, err
			}
			tok, err := os.ReadFile(n.token)
			if err != nil {
				return false, err
			}
			tokens[strings.TrimSpace(string(tok))] = n.name
			nodes[i] = n
		}
		proxy, err := startAPIProxy(dir, fmt.Sprintf("https://127.0.0.1:%d", cp.Port), cp.CA(), tokens)
		if err != nil {
			return false, err
		}
		defer proxy.stop()
		nriruntime.SetLog(io.Discard)
		args := func(n *fleetNode) []string {
			return []string{"--config", cfg, "--root", n.root, "--metrics-address", "127.0.0.1:0", "--events", "--node-condition",
				"--runtime-state", n.state, "--restart-runtime", "--restart-slots", fleetNS + "/" + fleetSlotLease,
				"--node-name", n.name, "--api-server", proxy.URL, "--api-token-file", n.token, "--api-ca-file", proxy.CA}
		}
		proxy.setPhase("start")
		for _, n := range nodes {
			if err := n.start(plugin, args(n)); err != nil {
				return false, err
			}
			defer n.stop(syscall.SIGKILL)
			defer n.rt.Stop()
		}
		settle := 10 * time.Second // the first condition written, everything settled
		if smoke {
			settle = 6 * time.Second
		}
		time.Sleep(settle)

		fmt.Printf("fleet: %d real oomguard-nri processes, a node each, against a real kube-apiserver (%s phases; the chart's defaults: events %g/s burst %d, per pod %d then 1/%s)\n",
			fleetNodes, fleetPhase, eventQPS, eventBurst, objectBurst, objectEvery)
		fmt.Printf("  %-40s %9s %9s %14s %15s  %s\n", "phase", "requests", "per node", "a node an hour", "at 5,000 nodes", "by verb and resource (all nodes)")
		ok := true
		goal := func(what string, met bool, figures string) {
			fmt.Printf("  %-40s goal %s: %s%s\n", "", what, verdict(met), figures)
			ok = ok && met
		}
		report := func(phase string, d time.Duration) tally {
			t := proxy.tally(phase)
			perNode := float64(t.total) / float64(fleetNodes)
			var kinds []string
			for k, n := range t.byKind {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			}
			slices.Sort(kinds)
			if t.refused > 0 {
				kinds = append(kinds, fmt.Sprintf("(the API server refused %d)", t.refused))
			}
			fmt.Printf("  %-40s %9d %9.1f %14.0f %15s  %s\n", phase+" ("+d.Round(time.Second).String()+")", t.total, perNode, perNode*3600/d.Seconds(),
				fmt.Sprintf("%.0f/s", perNode*float64(fleetTarget)/d.Seconds()), strings.Join(kinds, ", "))
			return t
		}
		phase := func(name string, d time.Duration, during func(stop <-chan struct{})) time.Duration {
			proxy.setPhase(name)
			start := time.Now()
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { during(stop); close(done) }()
			time.Sleep(d)
			close(stop)
			<-done
			return time.Since(start)
		}
		idle := func(<-chan struct{}) {}
		kill := func(cg string) {
			exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2"`, "sh", cg, hog).Run()
		}

		d := phase("idle", fleetPhase, idle)
		t := report("idle", d)
		goal("0 requests", t.total == 0, "")

		kills := 0
		d = phase("one pod killed again and again", fleetPhase, func(stop <-chan struct{}) {
			for {
				select {
				case <-stop:
					return
				default:
				}
				kill(cgroups[0])
				kills++
				time.Sleep(50 * time.Millisecond)
			}
		})
		// Per node: its pod's budget (25, then one each 5 minutes), within the node's bucket.
		objBudget := objectBurst + int(d/objectEvery)
		t = report("one pod killed again and again", d)
		most := maxOf(t.writes)
		goal(fmt.Sprintf("≤ %d writes a node (the pod's budget: 25, then one each 5 minutes; an hour: ≤ 36)", objBudget), most <= objBudget,
			fmt.Sprintf(" (at most %d; %d kills, %.0f a minute, on every node)", most, kills, float64(kills)/d.Minutes()))
		time.Sleep(2 * time.Second) // the last flush
		proxy.setPhase("settle")

		d = phase(fmt.Sprintf("%d containers at once", fleetBurst), fleetPhase/2, func(<-chan struct{}) {
			for _, cg := range cgroups {
				kill(cg)
			}
		})
		t = report(fmt.Sprintf("%d containers at once", fleetBurst), d)
		nodeBudget := eventBurst + int(eventQPS*d.Seconds())
		most = maxOf(t.writes)
		goal(fmt.Sprintf("≤ %d writes a node (the node's bucket)", nodeBudget), most <= nodeBudget,
			fmt.Sprintf(" (at most %d; Events created %.1f a node for %d pods)", most, float64(t.byKind["create events"])/float64(fleetNodes), fleetBurst))

		// A sustained storm across many pods, healthy, then the server
		// answering 429, then 500, then healthy again.
		storm := func(stop <-chan struct{}) {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				kill(cgroups[i%len(cgroups)])
				time.Sleep(50 * time.Millisecond)
			}
		}
		rates := map[string]float64{}
		for _, f := range []struct {
			name string
			code int32
		}{{"storm, healthy", 0}, {"storm, server answers 429", http.StatusTooManyRequests}, {"storm, server answers 500", http.StatusInternalServerError}, {"storm, recovered", 0}} {
			proxy.fault.Store(f.code)
			d := phase(f.name, fleetPhase, storm)
			t := report(f.name, d)
			rates[f.name] = float64(t.total) / float64(fleetNodes) / d.Seconds()
		}
		proxy.fault.Store(0)
		healthy := rates["storm, healthy"]
		goal("under 429 and 500 below the healthy rate (no amplification), writes again after",
			rates["storm, server answers 429"] < healthy && rates["storm, server answers 500"] < healthy && rates["storm, recovered"] > 0,
			fmt.Sprintf(" (a node's requests a second: healthy %.3f, 429 %.3f, 500 %.3f, recovered %.3f)", healthy,
				rates["storm, server answers 429"], rates["storm, server answers 500"], rates["storm, recovered"]))
		time.Sleep(fleetPhase / 4)

		// Every node's runtime must restart (it stopped serving NRI, and its
		// process predates oomguard's drop-in); another node holds the only slot.
		proxy.setPhase("settle")
		holder := fmt.Sprintf("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: %s-0, namespace: %s}\nspec: {holderIdentity: elsewhere, leaseDurationSeconds: 3600, renewTime: %q}\n",
			fleetSlotLease, fleetNS, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
		if out, err := cp.Kubectl(ctx, []byte(holder), "apply", "-f", "-"); err != nil {
			return false, fmt.Errorf("the held slot: %w: %s", err, out)
		}
		sleeper := exec.Command("sleep", "3600")
		if err := sleeper.Start(); err != nil {
			return false, err
		}
		defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
		runtime, err := kernel.ReadStarted("/", sleeper.Process.Pid)
		if err != nil {
			return false, err
		}
		for _, n := range nodes { // the plugin killed, its runtime gone, the plugin started again
			restartstate.Write(n.state, restartstate.State{Socket: n.rt.Socket, Pending: []restartstate.Pending{{Unit: "containerd.service", Process: runtime}}})
			n.stop(syscall.SIGKILL)
			n.rt.Stop()
			n.cmd = exec.Command(plugin, append(args(n), "--socket", n.rt.Socket)...)
			n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
			if err := n.cmd.Start(); err != nil {
				return false, err
			}
		}
		d = phase("waiting for a restart slot", 2*fleetPhase, idle)
		t = report("waiting for a restart slot", d)
		polls := float64(t.byKind["get leases"]) / float64(fleetNodes)
		goal("slot polls back off (5 s doubling to 5 minutes: ≤ 24 an hour once backed off; was 720)", polls <= 2+d.Seconds()/20,
			fmt.Sprintf(" (%.1f a node in %s)", polls, d.Round(time.Second)))
		proxy.setPhase("settle")
		for _, n := range nodes {
			restartstate.Write(n.state, restartstate.State{Socket: n.rt.Socket})
			n.stop(syscall.SIGTERM)
			if err := n.rt.Restart(); err != nil {
				return false, err
			}
			if err := n.start(plugin, args(n)); err != nil {
				return false, err
			}
		}
		proxy.quiet(settle, 5*settle) // the conditions written

		// A rollout: every plugin stopped, as kubelet stops it, and started again.
		d = phase("rollout", 0, func(<-chan struct{}) {
			for _, n := range nodes {
				n.stop(syscall.SIGTERM)
			}
			for _, n := range nodes {
				if err := n.start(plugin, args(n)); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
			time.Sleep(10 * time.Second)
		})
		t = report("rollout", d)
		perNode := float64(t.byKind["patch nodes/status"]) / float64(fleetNodes)
		goal("≤ 2 Node writes a node", maxOf(t.writes) <= 2, fmt.Sprintf(" (%.1f a node, at most %d)", perNode, maxOf(t.writes)))

		proxy.mu.Lock()
		fmt.Printf("  HTTP: %v over %d connections opened in all\n", proxy.protos, proxy.conns.Load())
		proxy.mu.Unlock()
		return ok, nil
	})
}

func maxOf(m map[string]int) int {
	most := 0
	for _, n := range m {
		most = max(most, n)
	}
	return most
}

// fleetNode is one node of the fleet: its NRI runtime, its root (the
// host's /proc, /sys and /dev, a /run of its own for its lock), the state
// install --nri-only leaves, and its agent's token.
type fleetNode struct {
	name, dir, root, state, token string
	rt                            *nriruntime.Runtime
	cmd                           *exec.Cmd
	log                           *os.File
}

func (n *fleetNode) prepare(ctx context.Context, cp *controlplane.Cluster, cgroups []string) error {
	n.root, n.state = filepath.Join(n.dir, "root"), filepath.Join(n.dir, "state.json")
	if err := os.MkdirAll(filepath.Join(n.root, "run"), 0o755); err != nil {
		return err
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := os.Symlink("/"+d, filepath.Join(n.root, d)); err != nil {
			return err
		}
	}
	var err error
	if n.token, _, err = cp.NodeAgentFiles(ctx, fleetNS, fleetAccount, n.name, filepath.Join(n.dir, "sa")); err != nil {
		return err
	}
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for j, cg := range cgroups {
		pod := nriruntime.KubeletPod(fmt.Sprintf("%s-%d", n.name, j), "ml", "burstable", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", 900, "python3", "train.py")
		ctr.Linux.CgroupsPath = strings.TrimPrefix(cg, memcgRoot())
		pods, ctrs = append(pods, pod), append(ctrs, ctr)
	}
	if n.rt, err = nriruntime.Start(filepath.Join(n.dir), pods, ctrs); err != nil {
		return err
	}
	return restartstate.Write(n.state, restartstate.State{Socket: n.rt.Socket})
}

func (n *fleetNode) start(plugin string, args []string) error {
	if n.log == nil {
		var err error
		if n.log, err = os.Create(filepath.Join(n.dir, "plugin.log")); err != nil {
			return err
		}
	}
	n.rt.PluginLog = n.log
	var err error
	n.cmd, err = n.rt.StartPlugin(plugin, args...)
	return err
}

// stop stops the plugin with sig and waits for it.
func (n *fleetNode) stop(sig syscall.Signal) {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(sig)
	n.cmd.Wait()
	n.cmd = nil
}
