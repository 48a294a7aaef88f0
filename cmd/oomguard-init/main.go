// oomguard-init is a tiny PID 1 for container images: it raises its own
// oom_score_adj, then execve()s the real init, so PID 1 is kept and every
// process the init starts inherits the score. See package initshim.
//
//	oomguard-init [--oom-score-adj N] [--oom-group 0|1] [--allow-lower] [--] [TARGET [ARGS…]]
package main

import (
	"syscall"
	_ "unsafe" // for go:linkname

	"github.com/oomguard/oomguard/initshim"
)

// runtimeArgs is the runtime's argv, as package os gets it; importing os
// would grow the binary by a sixth.
//
//go:linkname runtimeArgs os.runtime_args
func runtimeArgs() []string

// runtimeEnvs is the environment exactly as the process got it;
// syscall.Environ would drop empty entries and pull in package sync.
//
//go:linkname runtimeEnvs syscall.runtime_envs
func runtimeEnvs() []string

func main() {
	syscall.Exit(initshim.Main(runtimeArgs(), runtimeEnvs()))
}
