package scenarios

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/vm"
)

// The late-joining plugin (cri-tools' test; containerd #13698, cri-o
// #10090): the runtimes lose the containers created while a plugin
// synchronizes, in neither the Synchronize set nor sent as events. Pods
// are made through the runtime's CRI in a tight loop while the plugin
// connects, is killed and connects again, round after round, each round's
// last instance staying; once without the reconciler (nri.cri_endpoint =
// "none"), where a lost container keeps kubelet's score, then with it.

const (
	lateRounds   = 3
	latePerRound = 12
)

var lateScript = fmt.Sprintf(`oomguard-nri install --nri-only | sed 's/^/@@INSTALL /'
start_runtime
cp /etc/oomguard/config.toml /tmp/shipped.toml
for mode in without with; do
	endpoint='""'
	[ $mode = without ] && endpoint='"none"'
	sed -e "s|^# cri_endpoint = \"\"|cri_endpoint = $endpoint|" -e 's|^verify_interval = "60s"|verify_interval = "5s"|' /tmp/shipped.toml > /etc/oomguard/config.toml
	grep -q "^cri_endpoint = $endpoint" /etc/oomguard/config.toml || echo "@@RESULT config=unset"
	r=0
	while [ $r -lt %[1]d ]; do
		kubeletish churn $mode-$r --count %[2]d --parallel 6 --qos burstable --want 900 --wait 20s -- /sbin/init >/tmp/churn.out 2>&1 &
		churn=$!
		for k in 1 2 3; do
			start_plugin
			# The worker killed, as a crash or the OOM killer would; the last stays.
			[ $k -lt 3 ] && { sleep 0.$k; kill -9 $(cat /run/plugin.pid); }
		done
		wait $churn || { echo "@@RESULT churn_failed=$mode-$r"; tail -20 /tmp/churn.out | sed 's/^/@@CHURN /'; }
		sed -n "s/^@@RESULT churn=/@@RESULT mode=$mode churn=/p" /tmp/churn.out
		kill $(cat /run/plugin.pid)
		sleep 0.5
		r=$((r+1))
	done
	echo "@@RESULT mode=$mode reconciled=$(grep -c 'reconciled a container the runtime never reported' /tmp/plugin.log)"
	grep 'reconciled a container\|level=WARN\|level=ERROR' /tmp/plugin.log | sed "s/^/@@PLUGIN $mode: /"
	mv /tmp/plugin.log /tmp/plugin-$mode.log
	[ $mode = without ] && kubeletish remove-all >/dev/null
done
`, lateRounds, latePerRound)

func lateJoinSetup(rt vm.Runtime) func(g *vm.Guest) error {
	return func(g *vm.Guest) error {
		return vm.WithRuntime(g, rt, map[string]runcbundle.ImageFile{
			"/sbin/init": {Data: []byte("#!/bin/sh\nexec sleep 100000\n"), Mode: 0o755},
		})
	}
}

// lateJoined checks that with the reconciler every container ended at its
// rule, and notes both modes' figures: how many the runtime lost, and from
// running to the rule's score.
func lateJoined(rt vm.Runtime) func(r *vm.Run) error {
	return func(r *vm.Run) error {
		if m := r.Result("config"); m != nil {
			return fmt.Errorf("the shipped config.toml has no cri_endpoint line to set")
		}
		if m := r.Result("churn_failed"); m != nil {
			return fmt.Errorf("kubeletish churn %s failed", m["churn_failed"])
		}
		for _, mode := range []string{"without", "with"} {
			var made, lost, late int
			var fixed []int
			reconciled := "?"
			for _, m := range r.Results {
				if m["mode"] != mode {
					continue
				}
				if n, ok := m["reconciled"]; ok {
					reconciled = n
				}
				if _, ok := m["churn"]; !ok {
					continue
				}
				made++
				switch ms, _ := strconv.Atoi(m["fixed_ms"]); {
				case ms < 0:
					lost++
				case ms > 0:
					late++
					fallthrough
				default:
					fixed = append(fixed, ms)
				}
			}
			slices.Sort(fixed)
			r.Notes = append(r.Notes, fmt.Sprintf("%s, %s the reconciler: %d containers in %d rounds (3 plugin starts each): %d left at kubelet's score, %d set after they ran (running to rule p50 %d ms, max %d ms), %s reconciled",
				rt, mode, made, lateRounds, lost, late, pct(fixed, 50), pct(fixed, 100), reconciled))
			if made != lateRounds*latePerRound {
				return fmt.Errorf("%s: %d containers reported, want %d", mode, made, lateRounds*latePerRound)
			}
			switch {
			case mode == "with" && lost > 0:
				return fmt.Errorf("with the reconciler, %d containers kept kubelet's score", lost)
			case mode == "without" && reconciled != "0":
				return fmt.Errorf("with nri.cri_endpoint = \"none\" the plugin reconciled %s", reconciled)
			}
		}
		return nil
	}
}

// pct is the p-th percentile of sorted ms; -1 for none.
func pct(sorted []int, p int) int {
	if len(sorted) == 0 {
		return -1
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// lateJoining boots the scenario once a runtime, each on its combination.
func lateJoining(rts ...vm.Runtime) vm.Scenario {
	var variants []vm.Variant
	for _, rt := range rts {
		variants = append(variants, vm.Variant{Name: rt.String(), Setup: lateJoinSetup(rt), Check: lateJoined(rt), Kernel: rt.Kernel})
	}
	return vm.Scenario{Name: "late-joining", Title: "A plugin joining while pods are made: the containers the runtime never reports",
		MemoryMB: kubeNodeMB, Script: lateScript, Variants: variants, Slow: true, Timeout: 10 * time.Minute}
}
