package main

import (
	"context"
	"fmt"
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
// the same boot (goal ≤ 1.05×). One boot each, few pods, no KVM: figures
// to compare, which the goal judges only loosely.
func benchCluster(int) (bool, error) {
	if smoke {
		// A cluster boot takes minutes; the e2e tier runs this very drive.
		fmt.Println("cluster: left to the e2e tier's cluster boots in a smoke run")
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
	fmt.Println("cluster: through a real API server, one boot per runtime")
	fmt.Printf("  %-20s %28s %14s %14s %8s\n", "node", "helm install → guarded pod", "pod start with", "without", "ratio")
	ok := true
	for _, v := range s.Variants {
		run, err := env.Boot(context.Background(), s, v, nil)
		if err != nil {
			return false, err
		}
		f := run.Figures
		with, without := f["pod start with oomguard"], f["pod start without oomguard"]
		ratio := float64(with) / float64(without)
		ok = ok && ratio <= 1.05
		fmt.Printf("  %-20s %28s %14s %14s %7.2f×\n", v.Name, f["helm install --wait to the first guarded pod running"].Round(time.Millisecond),
			with.Round(time.Millisecond), without.Round(time.Millisecond), ratio)
	}
	fmt.Println("  goal: pod start with oomguard ≤ 1.05× without")
	return ok, nil
}
