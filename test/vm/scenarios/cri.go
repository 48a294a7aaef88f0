package scenarios

import (
	"fmt"
	"os"

	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/vm"
)

// The CRI scenario: containerd 2.x in the VM and the plugin's life beside
// it (started late, killed, containerd restarted), with pods made through
// the CRI by kubeletish, which can stop and restart at any step; the
// incidents themselves run through a real kubelet (kubelet.go).

func criSetup(g *vm.Guest) error {
	hog, err := os.ReadFile(g.Bin("guest"))
	if err != nil {
		return err
	}
	return vm.WithContainerd(g, map[string]runcbundle.ImageFile{
		// Each an init, as in VM-like pods: the policy's rule matches them.
		"/sbin/init":               {Data: []byte(vmLikeInit), Mode: 0o755}, // a runaway under a limit
		"/lib/systemd/systemd":     {Data: []byte(podInit), Mode: 0o755},    // a runaway without one
		"/usr/lib/systemd/systemd": {Data: []byte(doctorInit), Mode: 0o755}, // idle
		"/bin/hog":                 {Data: hog, Mode: 0o755},
	})
}

// inspected finds "@@RESULT inspect=LABEL …".
func inspected(r *vm.Run, label string) map[string]string {
	for _, m := range r.Results {
		if m["inspect"] == label {
			return m
		}
	}
	return nil
}

func expectInspect(r *vm.Run, label, score, group string) error {
	m := inspected(r, label)
	if m == nil || m["oom_score_adj"] != score || m["oom_group"] != group {
		return fmt.Errorf("%s: %v, want oom_score_adj %s and memory.oom.group %s", label, m, score, group)
	}
	return nil
}

func criLifecycle() vm.Scenario {
	return vm.Scenario{
		Name:     "cri-lifecycle",
		Title:    "Through containerd's CRI: resize, late start, plugin and containerd restarts",
		MemoryMB: 1024,
		Slow:     true,
		Script: `oomguard-nri install --nri-only | sed 's/^/@@INSTALL /'
start_containerd
kubeletish import /images/*.tar
kubeletish run early -- /usr/lib/systemd/systemd
sleep 1
kubeletish inspect early early-before-plugin
[ "$VARIANT" = with-nri ] && start_plugin
kubeletish inspect early early-synchronized
kubeletish resize early
sleep 0.5
kubeletish inspect early early-resized
[ "$VARIANT" = with-nri ] && kill -9 $(cat /run/plugin.pid)
kubeletish run missed1 -- /usr/lib/systemd/systemd
kubeletish run missed2 -- /usr/lib/systemd/systemd
sleep 1
kubeletish inspect missed1 missed-unfixed
[ "$VARIANT" = with-nri ] && start_plugin
kubeletish inspect missed1 missed1-fixed
kubeletish inspect missed2 missed2-fixed
synced=$(synced_count)
stop_containerd
start_containerd
[ "$VARIANT" = with-nri ] && wait_synced $synced
kubeletish run after -- /usr/lib/systemd/systemd
sleep 1
kubeletish inspect after after-restart
if kill -0 $(cat /run/plugin.pid 2>/dev/null) 2>/dev/null; then echo "@@RESULT plugin=alive"; else echo "@@RESULT plugin=gone"; fi
report
`,
		Variants: []vm.Variant{
			{Name: "without", Setup: criSetup, Check: func(r *vm.Run) error {
				for _, l := range []string{"early-before-plugin", "early-resized", "missed1-fixed", "after-restart"} {
					if err := expectInspect(r, l, "-997", "1"); err != nil {
						return fmt.Errorf("without the plugin kubelet's values must stand: %w", err)
					}
				}
				return nil
			}},
			{Name: "with-nri", Setup: criSetup, Check: func(r *vm.Run) error {
				checks := [][3]string{
					{"early-before-plugin", "-997", "1"},
					{"early-synchronized", "900", "0"},
					{"early-resized", "900", "0"},
					{"missed-unfixed", "-997", "1"},
					{"missed1-fixed", "900", "0"},
					{"missed2-fixed", "900", "0"},
					{"after-restart", "900", "0"},
				}
				for _, c := range checks {
					if err := expectInspect(r, c[0], c[1], c[2]); err != nil {
						return err
					}
				}
				if m := r.Result("plugin"); m == nil || m["plugin"] != "alive" {
					return fmt.Errorf("the plugin did not survive containerd's restart: %v", m)
				}
				return nil
			}},
		},
	}
}
