package main

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

func init() { sections = append(sections, section{"init", benchInit}) }

// execFloorSource is the least a Go program that execs its argument costs.
const execFloorSource = `package main

import (
	"syscall"
	_ "unsafe"
)

//go:linkname runtimeArgs os.runtime_args
func runtimeArgs() []string

func main() { syscall.Exec(runtimeArgs()[1], runtimeArgs()[1:], nil) }
`

// benchInit compares oomguard-init's size with the Go floor and the time it
// adds in front of /bin/true.
func benchInit(n int) (bool, error) {
	shim, err := built("oomguard-init")
	if err != nil {
		return false, err
	}
	st, err := os.Stat(shim)
	if err != nil {
		return false, err
	}
	return withDir("oomguard-bench", func(dir string) (bool, error) {
		floor, err := program(dir, "floor")
		if err != nil {
			return false, err
		}
		fst, err := os.Stat(floor)
		if err != nil {
			return false, err
		}
		sizeRatio := float64(st.Size()) / float64(fst.Size())
		sizeOK := sizeRatio <= 1.05

		cmd := func(path string, args ...string) func() *exec.Cmd {
			return func() *exec.Cmd { return exec.Command(path, args...) }
		}
		execFloor, err := program(dir, "execfloor")
		if err != nil {
			return false, err
		}
		if execFloor, err = installed(dir, execFloor); err != nil {
			return false, err
		}
		if shim, err = installed(dir, shim); err != nil {
			return false, err
		}
		times, err := timeCommands(n, cmd("/bin/true"), cmd(execFloor, "/bin/true"), cmd(shim, "--", "/bin/true"))
		if err != nil {
			return false, err
		}
		added := quantile(times[2], .5) - quantile(times[0], .5)
		floorAdded := quantile(times[1], .5) - quantile(times[0], .5)
		timeOK := added <= 2*time.Millisecond

		fmt.Println("oomguard-init: size and start-up cost")
		fmt.Printf("  %-34s %10d bytes\n", "Go floor (println only, same flags)", fst.Size())
		fmt.Printf("  %-34s %10d bytes  %.3f× (goal ≤ 1.05×): %s\n", "oomguard-init", st.Size(), sizeRatio, verdict(sizeOK))
		for _, a := range []string{"amd64", "arm64"} {
			if s, err := os.Stat("bin/oomguard-init-linux-" + a); err == nil {
				fmt.Printf("  %-34s %10d bytes\n", "oomguard-init-linux-"+a, s.Size())
			}
		}
		fmt.Printf("\n  wall time, %d runs each, interleaved\n", n)
		printTimes([]string{"/bin/true", "Go floor that execs /bin/true", "oomguard-init -- /bin/true"}, times)
		fmt.Printf("  added at the median: %s (goal ≤ 2 ms): %s; the Go floor adds %s, so the shim's own work costs %s\n",
			ms(added), verdict(timeOK), ms(floorAdded), ms(added-floorAdded))
		return sizeOK && timeOK, nil
	})
}
