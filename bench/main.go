// Command bench measures oomguard's programs against a baseline run the same
// way in the same run, and prints one table per program with the goal and
// whether it was met. Run it with `make bench` (binaries in bin/), or on a
// node without Go from the bench kit (make bench-kit; bench/README.md).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/testbin"
)

type section struct {
	name string
	run  func(n int) (ok bool, err error)
}

var sections []section

// smoke runs every section once, small, judging no goal: CI's check that
// the benchmarks still run (a benchmark that no longer runs is a broken test).
var smoke bool

func main() {
	var names []string
	for _, s := range sections {
		names = append(names, s.name)
	}
	only := flag.String("only", "", "run only these sections (comma-separated): "+strings.Join(names, ","))
	n := flag.Int("n", 400, "invocations per command")
	flag.BoolVar(&smoke, "smoke", false, "run every section once, small, and judge no goal")
	prebuild := flag.String("prebuild", "", "build the programs the sections build as they run into `DIR` (for GOARCH) and exit: the bench kit's")
	flag.Parse()
	if *prebuild != "" {
		os.Unsetenv(testbin.PrebuiltEnv) // build them, whatever the environment says
		dir, err := filepath.Abs(*prebuild)
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		for _, p := range programs {
			if err == nil {
				_, err = program(dir, p.name)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	for _, name := range strings.Split(*only, ",") {
		if *only != "" && !slices.Contains(names, name) {
			fmt.Fprintf(os.Stderr, "bench: no section %q; the sections: %s\n", name, strings.Join(names, ","))
			os.Exit(2)
		}
	}
	if kit := os.Getenv(kitEnv); kit != "" {
		fmt.Printf("the bench kit %s\n", kit)
	}
	if smoke {
		*n = 3
		doctorProcs, doctorCtrs, doctorRuns = 500, 10, 1
		benchTags, benchLayerMiB = 4, 1
		nriRounds, syncCtrs, floodRounds = 200, 20, 20
		fmt.Println("smoke run: every section small, its figures are not measurements and no goal is judged")
	}
	failed := false
	var missed []string
	for _, s := range sections {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), s.name) {
			continue
		}
		ok, err := s.run(*n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", s.name, err)
			failed = true
			continue
		}
		if !ok {
			missed = append(missed, s.name)
		}
		fmt.Println()
	}
	if len(missed) > 0 && !smoke {
		// Goals are reported, not enforced: the machines are shared and noisy.
		fmt.Printf("goals missed: %s\n", strings.Join(missed, ", "))
	}
	if failed {
		os.Exit(1)
	}
}

// timeCommands runs every command n times, interleaved so that machine noise
// falls on all of them alike, and returns the wall times of each.
func timeCommands(n int, cmds ...func() *exec.Cmd) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(cmds))
	for i := 0; i < n; i++ {
		for j, mk := range cmds {
			c := mk()
			start := time.Now()
			if b, err := c.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("%s: %v: %s", c.Path, err, b)
			}
			out[j] = append(out[j], time.Since(start))
		}
	}
	return out, nil
}

// built is the absolute path of a binary make build wrote into bin/.
func built(name string) (string, error) {
	p, err := filepath.Abs(filepath.Join("bin", name))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run make build", p)
	}
	return p, nil
}

// testBinary is the absolute path of a program make test-bins wrote.
func testBinary(name string) (string, error) {
	p, err := filepath.Abs(filepath.Join("build", "test-bin", name))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run make test-bins", p)
	}
	return p, nil
}

// installed is a copy of the binary at p in dir, written as a node gets
// its binaries (the hook's install --copy, an image's extraction). The Go
// linker writes its output through a mapping, and on this kernel (6.18) a
// process started from such a file takes its page faults more slowly: an
// empty Go program 0.07 ms more, the minimal hook 0.11, oomguard-hook 0.18
// (2026-11-26), a cost no installed binary pays and the bigger pay more.
func installed(dir, p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "installed-"+filepath.Base(p))
	return dst, os.WriteFile(dst, b, 0o755)
}

// floorSource is the smallest Go program: what any Go binary costs.
const floorSource = "package main\n\nfunc main() { println() }\n"

// programs are the programs the sections build as they run, their floors
// and baselines, by name: a package of the repository, or a Go source of
// the bench's own. The bench kit carries them prebuilt (-prebuild), and
// testbin.Build returns those there (testbin.PrebuiltEnv): a section builds
// what it runs through program, never testbin.Build itself.
var programs = []benchProgram{
	{name: "floor", source: floorSource},              // hook, init: the least any Go program costs
	{name: "execfloor", source: execFloorSource},      // init: the least any Go shim adds
	{name: "hookfloor", pkg: "./bench/hookfloor"},     // hook: the least any Go hook does
	{name: "doctorfloor", pkg: "./bench/doctorfloor"}, // doctor: only the reads
	{name: "noop", pkg: "./bench/noopplugin"},         // nri: NRI's round trip alone
}

type benchProgram struct{ name, pkg, source string }

// program builds the bench's program name into dir as make build builds
// oomguard's binaries, and returns its path.
func program(dir, name string) (string, error) {
	i := slices.IndexFunc(programs, func(p benchProgram) bool { return p.name == name })
	if i < 0 {
		return "", fmt.Errorf("the bench has no program %q", name)
	}
	pkg := programs[i].pkg
	if pkg == "" {
		pkg = filepath.Join(dir, name+".go")
		if err := os.WriteFile(pkg, []byte(programs[i].source), 0o644); err != nil {
			return "", err
		}
	}
	return testbin.Build(dir, name, pkg)
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// printTimes prints a table of median, p90 and p99 for each named series.
func printTimes(names []string, times [][]time.Duration) {
	fmt.Printf("  %-34s %10s %10s %10s\n", "command", "median", "p90", "p99")
	for i, name := range names {
		fmt.Printf("  %-34s %10s %10s %10s\n", name, ms(quantile(times[i], .5)), ms(quantile(times[i], .9)), ms(quantile(times[i], .99)))
	}
}

// withDir runs a section's f in a new directory (os.MkdirTemp's pattern), removed after.
func withDir(pattern string, f func(dir string) (bool, error)) (bool, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return false, err
	}
	if os.Getenv("OOMGUARD_BENCH_KEEP") != "" { // to read the logs a section leaves
		fmt.Fprintf(os.Stderr, "bench: keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	return f(dir)
}

// kitEnv is set, to the kit's name, by the bench kit's run-bench: the bench
// runs from an unpacked kit (make bench-kit), without the sources, Go or a
// network, and a section the kit cannot carry says so instead of running.
const kitEnv = "OOMGUARD_BENCH_KIT"

// registryEnv names the registry binary the sections run instead of
// Debian's: the bench kit's run-bench sets it to the kit's distribution v3
// where a node has no /usr/bin/docker-registry.
const registryEnv = "OOMGUARD_BENCH_REGISTRY"

// withRegistry runs f with a new directory and Debian's registry (or the
// one registryEnv names) storing below it, both gone after.
func withRegistry(name string, f func(dir string, reg *registrytest.Registry) (bool, error)) (bool, error) {
	return withDir("oomguard-bench-"+name, func(dir string) (bool, error) {
		bin := os.Getenv(registryEnv)
		if bin != "" && bin != registrytest.Binary {
			fmt.Printf("(%s: the registry is %s, not Debian's docker-registry; its figures are not comparable with Debian's)\n", name, bin)
		}
		reg, err := registrytest.StartWith(dir, registrytest.Options{Binary: bin})
		if err != nil {
			return false, err
		}
		defer reg.Stop()
		return f(dir, reg)
	})
}

// runPlugin starts NRI's runtime side in dir, reporting pods and ctrs at
// Synchronize, and the built plugin on it with args; its log is kept. stop
// ends both.
func runPlugin(dir, plugin string, pods []*api.PodSandbox, ctrs []*api.Container, args ...string) (rt *nriruntime.Runtime, cmd *exec.Cmd, log *syncWriter, stop func(), err error) {
	if rt, err = nriruntime.Start(dir, pods, ctrs); err != nil {
		return nil, nil, nil, nil, err
	}
	log = &syncWriter{w: &bytes.Buffer{}}
	rt.PluginLog = log
	if cmd, err = rt.StartPlugin(plugin, args...); err != nil {
		rt.Stop()
		return nil, nil, nil, nil, err
	}
	return rt, cmd, log, func() { cmd.Process.Kill(); cmd.Wait(); rt.Stop() }, nil
}
