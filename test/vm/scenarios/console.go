package scenarios

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/oomguard/oomguard/test/vm"
)

// The console scenario: the incident's console settings (the task dump on,
// console log level 7, a serial console) and a container of some 1,000
// tasks whose runaway meets its memory limit. The bytes the kernel sends to
// the serial port during that one OOM kill are counted on the host, between
// two marks the scenario writes, before and after `oomguard-doctor
// remediate`, which then is undone.

const consoleTasks = 1000

// consoleInit starts the tasks, waits to be told, then runs its runaway.
var consoleInit = `#!/bin/sh
i=0; while [ $i -lt ` + strconv.Itoa(consoleTasks) + ` ]; do sleep 100000 & i=$((i+1)); done
go=
trap 'go=1' USR1
while [ -z "$go" ]; do sleep 0.2; done
/bin/hog
sleep 100000
`

// consoleFixConfig opts into both fixes.
const consoleFixConfig = "[doctor]\nconsole_fix = [\"oom_dump_tasks\", \"printk\"]\n"

func consoleScenario() vm.Scenario {
	return vm.Scenario{
		Name:     "console",
		Title:    "One OOM kill's bytes on the serial console, before and after the remediation",
		MemoryMB: 768, Slow: true,
		Script: `sysctl -w vm.oom_dump_tasks=1 >/dev/null
dmesg -n 7
# oom_once NAME: run the pod NAME until its runaway is killed, between two
# marks on the console: the host counts what the serial port carried.
oom_once() {
	start_pod $1
	cg=/sys/fs/cgroup$(cat /bundles/$1.cgroup)
	i=0; while [ "$(wc -l < $cg/cgroup.procs)" -le ` + strconv.Itoa(consoleTasks) + ` ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
	init=$(runc --root /run/runc state $1 | sed -n 's/.*"pid": *\([0-9]*\).*/\1/p')
	[ -n "$init" ] || { echo "@@RESULT console=$1 state=not-running"; return; }
	sleep 1
	doctor
	echo "@@MARK $1-start"
	kill -USR1 $init
	i=0; while ! grep -q "^oom_kill [1-9]" $cg/memory.events && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
	sleep 2
	echo "@@MARK $1-end"
	echo "@@RESULT console=$1 tasks=$(wc -l < $cg/cgroup.procs)"
	runc --root /run/runc kill --all $1 KILL
	sleep 1
	runc --root /run/runc delete -f $1
}
oom_once before
oomguard-doctor remediate --config /etc/oomguard/console-fix.toml | sed 's/^/@@REMEDIATE /'
oom_once after
oomguard-doctor remediate --undo | sed 's/^/@@REMEDIATE /'
echo "@@RESULT undone dump=$(cat /proc/sys/vm/oom_dump_tasks) printk=$(cut -f1 /proc/sys/kernel/printk) dropin=$([ -f /etc/sysctl.d/90-oomguard-console.conf ] && echo left || echo removed)"
`,
		Variants: []vm.Variant{{Name: "remediate", Setup: consoleSetup, Check: consoleChecked}},
	}
}

func consoleSetup(g *vm.Guest) error {
	g.File("/etc/oomguard/console-fix.toml", []byte(consoleFixConfig), 0o644)
	for _, name := range []string{"before", "after"} {
		b, err := g.InitBundle(name, consoleInit, true)
		if err != nil {
			return err
		}
		adj := 900
		b.Spec.Process.OOMScoreAdj = &adj
		b.SetQoS("guaranteed")
		b.SetMemoryLimit(320 << 20) // the tasks take some 100 MiB
		g.File("/bundles/"+name+".cgroup", []byte(b.Spec.Linux.CgroupsPath), 0o644)
	}
	return nil
}

// consoleChecked: the task dump went to the console before (a line a task),
// a few lines after; the doctor said so both times; undo restored the node.
func consoleChecked(r *vm.Run) error {
	before, after := result(r, "console", "before"), result(r, "console", "after")
	if before == nil || after == nil {
		return fmt.Errorf("no measurement: before %v, after %v", before, after)
	}
	b, a := marked(r, "before"), marked(r, "after")
	r.Notes = append(r.Notes, fmt.Sprintf("serial bytes for one OOM kill of a %d-task container: %d with the incident's settings, %d after remediate", consoleTasks, b, a))
	if b < consoleTasks*50 {
		return fmt.Errorf("before the remediation the console got %d bytes: want the task dump, %d tasks × 50 bytes or more", b, consoleTasks)
	}
	if a == 0 || a > 400 {
		return fmt.Errorf("after the remediation the console got %d bytes: want the kill line alone", a)
	}
	if sevs := []string{severityAt(r, "console", 0), severityAt(r, "console", 1)}; sevs[0] == "0" || sevs[1] != "0" {
		return fmt.Errorf("the doctor's console severity before and after: %v, want a risk then ok", sevs)
	}
	if u := r.Result("undone"); u == nil || u["dump"] != "1" || u["printk"] != "7" || u["dropin"] != "removed" {
		return fmt.Errorf("remediate --undo: %v", u)
	}
	return nil
}

// marked is how many bytes the console carried between the marks of name.
func marked(r *vm.Run, name string) int {
	_, rest, ok := strings.Cut(r.Console, "@@MARK "+name+"-start")
	_, rest, _ = strings.Cut(rest, "\n")
	between, _, ok2 := strings.Cut(rest, "@@MARK "+name+"-end")
	if !ok || !ok2 {
		return -1
	}
	return len(between)
}

// severityAt is what the i-th run of the doctor said of check.
func severityAt(r *vm.Run, check string, i int) string {
	for _, m := range r.Results {
		if m["check"] == check {
			if i == 0 {
				return m["severity"]
			}
			i--
		}
	}
	return "missing"
}
