// Command demo boots a real Linux kernel with cgroup v2 in QEMU and replays
// the incidents oomguard answers — once without oomguard, once with each of
// its parts — and says, in plain words, what the kernel killed each time.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/doctor"
	"github.com/oomguard/oomguard/test/vm"
	"github.com/oomguard/oomguard/test/vm/scenarios"
)

var variantTitles = map[string]string{
	"without":            "without oomguard",
	"with-hook":          "with oomguard-hook",
	"with-shim":          "with oomguard-init",
	"with-nri":           "with oomguard-nri",
	"with-patched-image": "with imagepatch",
}

func main() {
	verbose := flag.Bool("v", false, "show the logs of NRI's runtime side and the plugins on the terminal too")
	flag.Parse()
	if err := run(*verbose); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(verbose bool) error {
	start := time.Now()
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	logPath := filepath.Join(repo, "build", "demo.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Println("oomguard demo: a real Linux kernel with cgroup v2, booted in QEMU, runs each incident")
	fmt.Println("once as kubelet sets pods up today (Guaranteed: oom_score_adj -997, memory.oom.group 1)")
	fmt.Println("and once with each part of oomguard. Preparing the kernel and binaries…")
	ctx := context.Background()
	env, err := vm.NewEnv(repo, filepath.Join(repo, "build"))
	if err != nil {
		return fmt.Errorf("%w (run it as make demo, as root)", err)
	}
	env.Log = logFile
	if verbose {
		env.Log = io.MultiWriter(logFile, os.Stderr)
	}
	failed := 0
	n := 0
	for _, s := range scenarios.All() {
		if s.Slow || s.Variants[0].Kernel != "" {
			continue // containerd in the VM, or an older kernel: make e2e runs those
		}
		n++
		fmt.Printf("\n%d. %s\n", n, s.Title)
		for _, v := range s.Variants {
			r, err := env.Boot(ctx, s, v, nil)
			if err != nil {
				return err
			}
			verdict := "as expected"
			if cerr := v.Check(r); cerr != nil {
				verdict = "UNEXPECTED: " + cerr.Error()
				failed++
			}
			fmt.Printf("   %-20s %s\n", variantTitles[v.Name], narrate(r))
			fmt.Printf("   %-20s (%s, VM ran %.1fs)\n", "", verdict, r.Elapsed.Seconds())
		}
	}
	fmt.Printf(`
In words: without oomguard, one runaway process in a VM-like pod takes its whole
"machine" with it (memory.oom.group kills PID 1 too), and a runaway that fills the
node makes the kernel kill sshd, systemd-networkd, containerd and kubelet first,
because the pod's -997 makes it all but immune. With oomguard-hook the container is
created with memory.oom.group 0 and oom_score_adj 900: only the runaway dies, in
both cases. oomguard-init, baked into the image, raises the score from inside, so
the node's daemons live; the container still dies whole, because only the node
side (the hook or the NRI plugin) can turn memory.oom.group off. oomguard-doctor
names both risks on such a node: the whole-container kill, and a serial console
that one OOM task dump holds for seconds with interrupts off; and before a
runaway starts it predicts, with the kernel's own arithmetic, whom a global OOM
will kill first: the kill-order run shows the kernel doing just that.

Done in %.0fs. The logs of NRI's runtime side and the plugins are in %s.
`, time.Since(start).Seconds(), logPath)
	if failed > 0 {
		return fmt.Errorf("%d runs did not show what they should", failed)
	}
	return nil
}

// narrate says what the kernel killed and who lived, from the run's facts.
func narrate(r *vm.Run) string {
	if f := r.Result("floor"); f != nil {
		if f["lower"] == "denied" {
			return "the container started at " + f["start"] + "; its processes could not put themselves back at -997"
		}
		return "the container started at " + f["start"] + "; its processes put themselves back at " + f["after"]
	}
	killed := uniq(r.KilledComms())
	var b strings.Builder
	if len(killed) == 0 {
		b.WriteString("the kernel killed nothing")
	} else {
		b.WriteString("the kernel killed " + strings.Join(killed, ", "))
	}
	var dead, alive []string
	for _, m := range r.Results {
		switch m["state"] {
		case "dead":
			dead = append(dead, m["daemon"])
		case "alive":
			alive = append(alive, m["daemon"])
		}
	}
	switch {
	case len(dead) > 0:
		fmt.Fprintf(&b, "; node daemons lost: %d of %d", len(dead), len(dead)+len(alive))
	case len(alive) > 0:
		b.WriteString("; every node daemon lived")
	}
	var checks []string
	for _, m := range r.Results {
		if c, ok := m["check"]; ok {
			checks = append(checks, c+" "+severityName(m["severity"]))
		}
	}
	if len(checks) > 0 {
		b.WriteString("; the doctor says: " + strings.Join(checks, ", "))
	}
	if p := r.Result("pid1"); p != nil {
		fmt.Fprintf(&b, "; PID 1 and %s services lived", p["services_alive"])
	} else if slices.Contains(killed, "init") {
		b.WriteString("; the container's PID 1 died")
	}
	return b.String()
}

// severityName names a severity the VM reported as a number; the worrying
// ones in capitals.
func severityName(n string) string {
	v, err := strconv.Atoi(n)
	if err != nil || v < int(doctor.OK) || v > int(doctor.Critical) {
		return "?" + n
	}
	if s := doctor.Severity(v); s >= doctor.Warning {
		return strings.ToUpper(s.String())
	}
	return doctor.Severity(v).String()
}

func uniq(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
