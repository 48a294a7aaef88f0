// Command forker makes, inside a container, the children a process exec'd
// into it can make without exec'ing anything, for oomguard's exec tests:
//
//	forker clone-parent N   N children cloned with CLONE_PARENT (their parent
//	                        is the exec'd process's), then it exits
//	forker daemonize N      a daemon: one child that forks N and stays, the
//	                        exec'd process exiting at once
//
// Each child only waits (pause) until it is killed. The children run no Go
// code after the clone: they are copies of one thread of a Go process.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: forker clone-parent|daemonize N")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "forker: N must be a positive number")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "clone-parent":
		for range n {
			if clone(syscall.CLONE_PARENT) == 0 {
				park()
			}
		}
	case "daemonize":
		if clone(0) == 0 {
			for range n {
				if clone(0) == 0 {
					park()
				}
			}
			park()
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: forker clone-parent|daemonize N")
		os.Exit(2)
	}
}

//go:nosplit
func clone(flags uintptr) uintptr {
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, flags|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 1, 0, 0)
	}
	return pid
}

//go:nosplit
func park() {
	for {
		syscall.RawSyscall(syscall.SYS_PAUSE, 0, 0, 0)
	}
}
