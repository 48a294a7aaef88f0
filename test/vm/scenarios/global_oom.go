package scenarios

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/vm"
)

// nodeDaemons stand for the daemons the incident's node lost, at score 0.
var nodeDaemons = []string{"sshd", "systemd-networkd", "kubelet", "containerd"}

// A Guaranteed pod with no memory limit whose runaway allocates past the
// node's memory: a global OOM.
const podInit = `#!/bin/sh
/bin/hog
echo "@@RESULT pod_init=alive hog_exit=$?"
`

func globalOOM() vm.Scenario {
	setup := func(fix string) func(g *vm.Guest) error {
		return func(g *vm.Guest) error {
			for _, d := range nodeDaemons {
				if err := g.CopyFile("/daemons/"+d, g.Bin("guest")); err != nil {
					return err
				}
			}
			b, err := g.InitBundle("pod", podInit, true)
			if err != nil {
				return err
			}
			vm.AsKubeletGuaranteed(b, 0)
			if fix != "image" {
				return vm.WithFix(g, b, fix)
			}
			hog, err := os.ReadFile(g.Bin("guest"))
			if err != nil {
				return err
			}
			if err := vm.WithPatchedImage(b, map[string]runcbundle.ImageFile{
				"/sbin/init": {Data: []byte(podInit), Mode: 0o755},
				"/bin/hog":   {Data: hog, Mode: 0o755},
			}, []string{"/sbin/init"}); err != nil {
				return err
			}
			vm.AsKubeletGuaranteed(b, 0) // the unpacked image brings its own args
			return nil
		}
	}
	names := strings.Join(nodeDaemons, " ")
	protected := func(r *vm.Run) error {
		if dead := deadDaemons(r); len(dead) > 0 {
			return fmt.Errorf("node daemons died: %s; the kernel killed %s", vm.Names(dead), vm.Names(r.KilledComms()))
		}
		if len(r.Killed) == 0 || r.Killed[0].Comm != "hog" {
			return fmt.Errorf("the kernel killed %s, want the pod's runaway (hog) first", vm.Names(r.KilledComms()))
		}
		if r.Killed[0].Adj != 900 {
			return fmt.Errorf("the runaway died at oom_score_adj %d, want 900", r.Killed[0].Adj)
		}
		return nil
	}
	return vm.Scenario{
		Name:     "global-oom",
		Title:    "A Guaranteed pod's runaway exhausts the node's memory",
		MemoryMB: 256,
		Script: `start_daemons ` + names + `
run_pod pod
check_daemons ` + names + `
report
`,
		Variants: []vm.Variant{
			{Name: "without", Setup: setup(""), Check: func(r *vm.Run) error {
				dead := deadDaemons(r)
				if len(dead) == 0 {
					return fmt.Errorf("no node daemon died (the kernel killed %s): the incident did not reproduce", vm.Names(r.KilledComms()))
				}
				if len(r.Killed) == 0 || !isDaemon(r.Killed[0].Comm) {
					return fmt.Errorf("the kernel killed %s, want a node daemon first", vm.Names(r.KilledComms()))
				}
				return nil
			}},
			{Name: "with-hook", Setup: setup("hook"), Check: protected},
			{Name: "with-shim", Setup: setup("shim"), Check: protected},
			{Name: "with-nri", Setup: setup("nri"), Check: protected},
			{Name: "with-patched-image", Setup: setup("image"), Check: protected},
		},
	}
}

// deadDaemons lists the node daemons the scenario found dead.
func deadDaemons(r *vm.Run) []string {
	var dead []string
	for _, m := range r.Results {
		if m["state"] == "dead" {
			dead = append(dead, m["daemon"])
		}
	}
	return dead
}

// isDaemon matches a kernel comm to a node daemon.
func isDaemon(comm string) bool {
	return slices.ContainsFunc(nodeDaemons, func(d string) bool { return kernel.TaskComm(d) == comm })
}
