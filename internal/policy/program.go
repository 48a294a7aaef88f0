package policy

import "strings"

// initWrappers are the small inits runtimes and images put before a
// container's program, by base name, with the flags of theirs that take a
// value: podman run --init (/run/podman-init, which is catatonit), tini,
// dumb-init, docker's docker-init, and oomguard's own shim.
var initWrappers = map[string]map[string]bool{
	"podman-init":   {},
	"catatonit":     {},
	"docker-init":   {"-p": true, "-e": true},
	"tini":          {"-p": true, "-e": true},
	"tini-static":   {"-p": true, "-e": true},
	"dumb-init":     {"-r": true, "--rewrite": true},
	"oomguard-init": {"--oom-score-adj": true, "-s": true, "--score": true, "--oom-group": true, "-g": true},
}

// maxWrappers bounds how many wrappers Program looks through.
const maxWrappers = 4

// Program is the program a container runs: args[0], or, when that is a known
// init wrapper, the program the wrapper starts.
func Program(args []string) string {
	for range maxWrappers {
		if len(args) == 0 {
			return ""
		}
		valued, ok := initWrappers[baseName(args[0])]
		if !ok {
			return args[0]
		}
		rest := args[1:]
		for len(rest) > 0 {
			a := rest[0]
			if a == "--" {
				rest = rest[1:]
				break
			}
			if len(a) < 2 || a[0] != '-' {
				break
			}
			rest = rest[1:]
			if valued[a] && len(rest) > 0 {
				rest = rest[1:]
			}
		}
		if len(rest) == 0 {
			return args[0] // the wrapper alone: it is the program
		}
		args = rest
	}
	return args[0]
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }
