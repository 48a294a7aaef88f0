package scenarios

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/oomguard/oomguard/test/vm"
)

// The kill-order scenario: the incident's node in miniature — daemons at 0
// of different sizes, a BestEffort pod at 1000, and a VM-like Guaranteed pod
// at -997 without a limit. The doctor predicts, before the runaway starts,
// the order in which a global OOM will kill; then the runaway runs and the
// kernel's "Killed process" lines say what it really did. Every score the
// doctor shows is compared with /proc/PID/oom_score on the same node.

// killOrderDaemons and the MiB each holds: distinct, so the order is the
// kernel's arithmetic and not a tie.
var killOrderDaemons = []struct {
	name string
	mb   int
}{{"sshd", 6}, {"systemd-networkd", 10}, {"rpcbind", 3}, {"agetty", 14}}

// A VM-like pod's init that idles until told to run its runaway.
const triggeredInit = `#!/bin/sh
go=
trap 'go=1' USR1
while [ -z "$go" ]; do sleep 0.2; done
/bin/hog
`

func killOrderScenario() vm.Scenario {
	var start, names []string
	for _, d := range killOrderDaemons {
		start = append(start, fmt.Sprintf("/daemons/%s %d &\necho $! > /run/%s.pid", d.name, d.mb, d.name))
		names = append(names, d.name)
	}
	return vm.Scenario{
		Name:     "kill-order",
		Title:    "The doctor predicts the order of a global OOM's kills",
		MemoryMB: 256,
		Script: strings.Join(start, "\n") + `
sleep 1
start_pod besteffort
start_pod vm
sleep 1
doctor
/oomguard/bin/oomguard-doctor --sample 0 --tree | sed -n 's/^ *\[\([0-9]*\)\] .*: \([0-9]*\) ([-+0-9]*).*/@@TREE \1 \2/p'
for d in /proc/[0-9]*; do s=$(cat $d/oom_score 2>/dev/null) && echo "@@SCORE ${d#/proc/} $s"; done
init=$(runc --root /run/runc state vm | sed -n 's/.*"pid": *\([0-9]*\).*/\1/p')
kill -USR1 $init
i=0; while kill -0 $init 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
check_daemons ` + strings.Join(names, " ") + `
report
`,
		Variants: []vm.Variant{
			{Name: "without", Setup: killOrderSetup(false), Check: killOrderChecked},
			{Name: "with-hook", Setup: killOrderSetup(true), Check: func(r *vm.Run) error {
				if s := severity(r, "oom-ranking"); s != "0" {
					return fmt.Errorf("the doctor's oom-ranking severity is %s with the pod guarded, want ok (0)", s)
				}
				if len(r.Killed) == 0 || r.Killed[0].Comm != "hog" {
					return fmt.Errorf("the kernel killed %s, want the runaway first, as the doctor said", vm.Names(r.KilledComms()))
				}
				if dead := deadDaemons(r); len(dead) > 0 {
					return fmt.Errorf("node daemons died: %v", dead)
				}
				return scoresMatch(r)
			}},
		},
	}
}

func killOrderSetup(hook bool) func(g *vm.Guest) error {
	return func(g *vm.Guest) error { return killOrderNode(g, hook) }
}

func killOrderNode(g *vm.Guest, hook bool) error {
	for _, d := range killOrderDaemons {
		if err := g.CopyFile("/daemons/"+d.name, g.Bin("guest")); err != nil {
			return err
		}
	}
	be, err := g.Bundle("besteffort", "/bin/sleep", "100000")
	if err != nil {
		return err
	}
	adj := 1000
	be.Spec.Process.OOMScoreAdj = &adj
	be.SetQoS("besteffort")
	b, err := g.InitBundle("vm", triggeredInit, true)
	if err != nil {
		return err
	}
	vm.AsKubeletGuaranteed(b, 0)
	if hook {
		vm.WithHook(b)
	}
	return nil
}

var predictedRE = regexp.MustCompile(`killed before it, in order: (.*)`)
var killedRE = regexp.MustCompile(`(\S+)\[(\d+)\]`)

// killOrderChecked: the doctor called the node critical, and the processes
// it said the kernel would kill before the runaway are the ones the kernel
// killed before it, in that order; its scores are the kernel's.
func killOrderChecked(r *vm.Run) error {
	if s := severity(r, "oom-ranking"); s != "4" {
		return fmt.Errorf("the doctor's oom-ranking severity is %s, want critical (4)", s)
	}
	var predicted []string
	for _, l := range strings.Split(r.Console, "\n") {
		if m := predictedRE.FindStringSubmatch(l); m != nil && strings.Contains(l, "@@DOCTOR") {
			for _, k := range killedRE.FindAllStringSubmatch(m[1], -1) {
				predicted = append(predicted, k[2])
			}
			break
		}
	}
	var killed []string
	for _, k := range r.Killed {
		if k.Adj == vm.GuaranteedScore { // the runaway, or its pod with it
			break
		}
		killed = append(killed, strconv.Itoa(k.Pid))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("kill order: predicted %v, the kernel %v (%s)", predicted, killed, vm.Names(r.KilledComms())))
	if len(predicted) == 0 || strings.Join(predicted, " ") != strings.Join(killed, " ") {
		return fmt.Errorf("the doctor predicted the kills %v before the runaway, the kernel made %v (%s)", predicted, killed, vm.Names(r.KilledComms()))
	}
	return scoresMatch(r)
}

// scoresMatch: every oom_score the doctor's tree shows is the kernel's,
// within one point: since Linux 6.2 the kernel reads a process's memory
// from per-CPU counters that /proc sums (kernel.CounterSlack: 32 pages on
// the VM's one CPU, under a point of its oom_score).
func scoresMatch(r *vm.Run) error {
	kernel := map[string]string{}
	for _, l := range strings.Split(r.Console, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "@@SCORE" {
			kernel[f[1]] = f[2]
		}
	}
	var wrong []string
	n := 0
	for _, l := range strings.Split(r.Console, "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "@@TREE" {
			continue
		}
		n++
		if k, ok := kernel[f[1]]; ok && !withinAPoint(k, f[2]) {
			wrong = append(wrong, fmt.Sprintf("pid %s: doctor %s, kernel %s", f[1], f[2], k))
		}
	}
	if n == 0 || len(wrong) > 0 {
		return fmt.Errorf("the doctor's oom_score differs from the kernel's for %d of %d processes: %v", len(wrong), n, wrong)
	}
	return nil
}

// withinAPoint reports whether two oom_scores differ by a point at most.
func withinAPoint(a, b string) bool {
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	return err1 == nil && err2 == nil && x-y <= 1 && y-x <= 1
}
