package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/oomguard/oomguard/test/vm"
)

func init() { sections = append(sections, section{"daemonset", benchDaemonset}) }

// benchDaemonset boots the VM scenario in which a real kubelet runs the
// chart's pod from the release image on each runtime, and reports how long
// its plugin took to be running and, once the runtime restarted with NRI
// on, to be connected. One boot each, without KVM: figures, no goal.
func benchDaemonset(int) (bool, error) {
	repo, err := filepath.Abs(".")
	if err != nil {
		return false, err
	}
	env, err := vm.NewEnv(repo, filepath.Join(repo, "build"))
	if err != nil {
		return false, err
	}
	var s vm.Scenario
	for _, sc := range vm.Scenarios() {
		if sc.Name == "daemonset" {
			s = sc
		}
	}
	fmt.Println("daemonset: the chart's pod through a real kubelet in the VM (one boot each)")
	fmt.Printf("  %-20s %26s %30s\n", "node", "static pod → plugin running", "runtime restart → connected")
	variants := s.Variants
	if smoke {
		variants = variants[:1]
	}
	for _, v := range variants {
		run, err := env.Boot(context.Background(), s, v)
		if err != nil {
			return false, err
		}
		if err := v.Check(run); err != nil {
			return false, fmt.Errorf("%s: %w", v.Name, err)
		}
		started, connected, ok := vm.ChartTimes(run)
		if !ok {
			continue // the hook mode: nothing connects
		}
		fmt.Printf("  %-20s %26s %30s\n", v.Name, started.Round(time.Millisecond), connected.Round(time.Millisecond))
	}
	return true, nil
}
