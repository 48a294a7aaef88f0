package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/test/nodefixture"
)

func init() { sections = append(sections, section{"doctor", benchDoctor}) }

var doctorProcs, doctorCtrs, doctorRuns = 20000, 400, 5

// benchDoctor times a full report with the process tree on a fixture node of
// 20,000 processes in 400 containers, beside two baselines on the very same
// files: the investigation's oom_info.py (from the incident notes), which
// sees the fixture as /proc through a bind mount in a mount namespace of its
// own, and a program that only reads the files the doctor reads.
func benchDoctor(int) (bool, error) {
	bin, err := built("oomguard-doctor")
	if err != nil {
		return false, err
	}
	return withDir("oomguard-bench-doctor", func(dir string) (bool, error) {
		fmt.Fprintf(os.Stderr, "writing a fixture node of %d processes…\n", doctorProcs)
		root := filepath.Join(dir, "node")
		procs, files := nodefixture.Large(doctorProcs, doctorCtrs)
		if err := nodefixture.Write(root, procs, files); err != nil {
			return false, err
		}
		floor, err := program(dir, "doctorfloor")
		if err != nil {
			return false, err
		}
		cmds := []func() *exec.Cmd{
			func() *exec.Cmd { return exec.Command(bin, "--root", root, "--sample", "0", "--tree") },
			func() *exec.Cmd { return exec.Command(floor, root) },
		}
		names := []string{"oomguard-doctor --tree", "read-only floor"}
		script, scriptErr := ominfoScript()
		if scriptErr == nil {
			// The script reads /proc: give it the fixture there, in a private mount namespace.
			cmds = append(cmds, func() *exec.Cmd {
				return exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
					`mount --bind "$1/proc" /proc && exec python3 "$2"`, "sh", root, script)
			})
			names = append(names, "oom_info.py (incident notes)")
		}
		times := make([][]time.Duration, len(cmds))
		rss := make([]int64, len(cmds))
		for range doctorRuns {
			for i, mk := range cmds {
				c := mk()
				start := time.Now()
				out, err := c.CombinedOutput()
				d := time.Since(start)
				if ee, ok := err.(*exec.ExitError); ok && i == 0 && ee.ExitCode() <= 2 {
					err = nil // exit 1 and 2 are findings
				}
				if err != nil {
					return false, fmt.Errorf("%s: %v: %s", names[i], err, out)
				}
				if i == 2 && !strings.Contains(string(out), "[1] systemd") {
					return false, fmt.Errorf("oom_info.py did not read the fixture: %s", out[:min(len(out), 300)])
				}
				times[i] = append(times[i], d)
			}
		}
		for i, mk := range cmds {
			if rss[i], err = peakRSS(mk()); err != nil {
				return false, fmt.Errorf("%s: %w", names[i], err)
			}
		}
		doc, fl := quantile(times[0], .5), quantile(times[1], .5)
		floorRatio := float64(doc) / float64(fl)
		ok := doc <= time.Second && rss[0] <= 50<<20 && floorRatio <= 1.5
		fmt.Printf("oomguard-doctor: full report with the process tree, fixture node of %d processes in %d containers, median of %d runs\n", doctorProcs, doctorCtrs, doctorRuns)
		fmt.Printf("  %-34s %10s %12s\n", "", "wall", "peak RSS")
		for i, n := range names {
			fmt.Printf("  %-34s %10s %9.1f MB\n", n, ms(quantile(times[i], .5)), float64(rss[i])/(1<<20))
		}
		fmt.Printf("  doctor %s (goal ≤ 1 s), %.1f MB (goal ≤ 50 MB), %.2f× its read-only floor (goal ≤ 1.5×)", ms(doc), float64(rss[0])/(1<<20), floorRatio)
		if scriptErr != nil {
			fmt.Printf(": %s\n  oom_info.py skipped: %v\n", verdict(ok), scriptErr)
			return ok, nil
		}
		speedup := float64(quantile(times[2], .5)) / float64(doc)
		ok = ok && speedup >= 5
		fmt.Printf(", %.1f× faster than oom_info.py (goal ≥ 5×): %s\n", speedup, verdict(ok))
		return ok, nil
	})
}

// peakRSS runs c once under GNU time and returns its peak resident set. A
// child forked from this (large) process would report this process's peak
// instead: the kernel carries the pre-exec image's high-water mark into
// ru_maxrss; time's children start from time's own, small one.
func peakRSS(c *exec.Cmd) (int64, error) {
	out, err := os.CreateTemp("", "oomguard-bench-rss")
	if err != nil {
		return 0, err
	}
	defer os.Remove(out.Name())
	out.Close()
	w := exec.Command("/usr/bin/time", append([]string{"-f", "%M", "-o", out.Name(), c.Path}, c.Args[1:]...)...)
	if b, err := w.CombinedOutput(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 2 { // 1 and 2 are the doctor's findings
			return 0, fmt.Errorf("%v: %s", err, b)
		}
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		return 0, err
	}
	lines := strings.Fields(string(b))
	if len(lines) == 0 {
		return 0, fmt.Errorf("no peak RSS from /usr/bin/time: %q", b)
	}
	kb, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	return kb << 10, err
}

// ominfoScript is the investigation's script, kept verbatim in testdata,
// or an error where it cannot run (a node without python3).
func ominfoScript() (string, error) {
	p, err := filepath.Abs("bench/testdata/oom_info.py")
	if err != nil {
		return "", err
	}
	if _, err = os.Stat(p); err == nil {
		_, err = exec.LookPath("python3")
	}
	return p, err
}
