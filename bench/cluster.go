package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/oomguard/oomguard/test/vm"
	"github.com/oomguard/oomguard/test/vm/scenarios"
)

func init() { sections = append(sections, section{"cluster", benchCluster}) }

// benchCluster boots the cluster scenario (a real control plane, the VM's
// kubelet registered with it) on each runtime and reports what its drive
// measured: `helm install --wait` to the first guarded pod running, and pod
// start through the API with oomguard vs without it on the same node, in
// the same boot (goal ≤ 1.05× on the medians): four interleaved blocks of
// pods (without, with, with, without: test/vm/scenarios/podstart.go), each
// side's median and quartiles, the ratio with its bootstrap 95% interval,
// and where the difference goes: the plugin's decision and writes (pods a
// rule guards against pods none selects), being installed (those against
// every pod without), and the DaemonSet's containers' CPU meanwhile.
func benchCluster(int) (bool, error) {
	if smoke {
		// A cluster boot takes minutes; the e2e tier runs this very drive.
		fmt.Println("cluster: left to the e2e tier's cluster boots in a smoke run")
		return true, nil
	}
	if os.Getenv(kitEnv) != "" {
		// Its VM needs qemu on the node, the guest kernels (build/vm) and the
		// VM's runtimes, kubelet and agent: a tier of its own in a checkout.
		fmt.Println("cluster: not in the bench kit (it boots a VM: qemu, its kernels, runtimes and kubelet); run it in a checkout: make bench, then go run ./bench -only cluster")
		return true, nil
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		return false, err
	}
	env, err := vm.NewEnv(repo, filepath.Join(repo, "build"))
	if err != nil {
		return false, err
	}
	var s vm.Scenario
	for _, sc := range scenarios.All() {
		if sc.Name == "cluster" {
			s = sc
		}
	}
	fmt.Println("cluster: through a real API server, one boot of containerd 2.x; pod start = kubectl apply to Ready, in blocks without/with/with/without")
	fmt.Printf("  %-18s %14s %8s %24s %24s %22s\n", "node", "helm → guarded", "n a side", "with: median (p25–p75)", "without: median (p25–p75)", "ratio (95% interval)")
	ok := true
	var split []string
	for _, v := range s.Variants {
		if v.Name != vm.Containerd2.String() {
			continue // pod start is timed on containerd 2.x alone: the e2e tier's time
		}
		run, err := env.Boot(context.Background(), s, v, nil)
		if err != nil {
			return false, err
		}
		p, found := scenarios.PodStartOf(run.Figures)
		if !found {
			return false, fmt.Errorf("%s: the drive measured no pod start", v.Name)
		}
		ok = ok && p.Ratio.X <= 1.05
		q := func(s scenarios.Spread) string {
			return fmt.Sprintf("%d ms (%d–%d)", s.Median.Milliseconds(), s.P25.Milliseconds(), s.P75.Milliseconds())
		}
		fmt.Printf("  %-18s %14s %8s %24s %24s %22s\n", v.Name, run.Figures["helm install --wait to the first guarded pod running"].Round(time.Second),
			fmt.Sprintf("%d/%d", p.With.N, p.Without.N), q(p.With), q(p.Without), fmt.Sprintf("%.2f× (%.2f–%.2f)", p.Ratio.X, p.Ratio.Low, p.Ratio.High))
		nw, nwo := p.NodeCPU()
		split = append(split, fmt.Sprintf("  %-18s %20s %24s %30s %30s %24s", v.Name,
			fmt.Sprintf("%.2f× (%.2f–%.2f)", p.Plugin.X, p.Plugin.Low, p.Plugin.High),
			fmt.Sprintf("%.2f× (%.2f–%.2f)", p.Installed.X, p.Installed.Low, p.Installed.High),
			cpuShare(p, "oomguard-nri"), cpuShare(p, "oomguard-doctor"),
			fmt.Sprintf("%d / %d ms: %.3f×", nw.Milliseconds(), nwo.Milliseconds(), float64(nw)/float64(nwo))))
	}
	fmt.Println("  where it goes:")
	fmt.Printf("  %-18s %20s %24s %30s %30s %24s\n", "node", "guarded / unguarded", "unguarded / all without", "plugin CPU", "doctor CPU", "node CPU a pod, with / without")
	for _, l := range split {
		fmt.Println(l)
	}
	fmt.Println("  guarded / unguarded: pods the rule guards against pods no rule selects, with oomguard, over the same without it: the plugin's decision and writes;")
	fmt.Println("  unguarded / all without: the plugin's NRI round trip and the DaemonSet being there; CPU: each of the DaemonSet's containers in the")
	fmt.Println("  with blocks (its share of the node's one core; bg: its background, at its rate in the quiet seconds before; the rest a pod started),")
	fmt.Println("  and the node's busy CPU per pod started on each side")
	fmt.Println("  goal: median pod start with oomguard ≤ 1.05× without; intervals: bootstrap 95%, 2,000 resamplings of each side's pods")
	return ok, nil
}

// cpuShare is a DaemonSet container's CPU in the with blocks, its share of
// the core then, its background and the rest a pod.
func cpuShare(p scenarios.PodStart, name string) string {
	if p.WindowWith == 0 {
		return "-"
	}
	bg, perPod := p.AgentSplit(name)
	return fmt.Sprintf("%d ms %.1f%% (bg %d, %d a pod)", p.Agent[name].Milliseconds(), 100*float64(p.Agent[name])/float64(p.WindowWith),
		bg.Milliseconds(), perPod.Milliseconds())
}
