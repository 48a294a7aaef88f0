// Package initshim is oomguard-init, a tiny PID 1 for container images: it raises its own
// oom_score_adj (and, if asked, sets memory.oom.group on its own cgroup), then
// execve()s the real init, so PID 1 is kept and every process the init starts
// inherits the score. It never forks, and never stops the container from
// booting: a failed write is one line on stderr, then the exec goes on.
//
//	oomguard-init [--oom-score-adj N] [--oom-group 0|1] [--allow-lower] [--] [TARGET [ARGS…]]
//
// It is written on package syscall alone (no fmt, no os) to stay within a few
// percent of the smallest Go binary.
package initshim

import (
	"syscall"
	"unsafe"
)

// Main runs the shim on the real system with the process's argv and
// environment; it returns only when the exec failed, with the exit code.
func Main(args, env []string) int { return run(args, env, syscall.Getpid(), sysOps{}) }

// ops is what run does to the system, so tests can watch it.
type ops interface {
	readFile(path string) ([]byte, error)
	writeFile(path string, data []byte) error
	exec(path string, argv, env []string) error
	access(path string) error
	write(fd int, msg string)
}

// run returns only when the exec failed or it did not exec: its result is
// the exit code.
func run(args, env []string, pid int, o ops) int {
	warn := func(msg string) { o.write(2, msg) }
	opts := parse(args[1:], env, warn)
	switch {
	case opts.help:
		o.write(1, usage)
		return 0
	case opts.version:
		o.write(1, "oomguard-init "+Version)
		return 0
	case opts.unknown != "":
		warn("oomguard-init: unknown flag " + opts.unknown + " (-- before a target)")
		if pid != 1 { // not a container's PID 1: a mistyped command line must not start an init
			return 2
		}
	}
	if opts.score != nil {
		setScore(*opts.score, opts.allowLower, o)
	}
	if opts.group != nil {
		setGroup(*opts.group, o)
	}
	path, err := lookPath(opts.argv[0], getenv(env, "PATH"), o)
	if err == nil {
		err = o.exec(path, opts.argv, env)
	}
	o.write(2, "oomguard-init: "+opts.argv[0]+": "+err.Error())
	if err == syscall.ENOENT || err == syscall.ENOTDIR {
		return 127
	}
	return 126
}

const scoreFile = "/proc/self/oom_score_adj"

func setScore(want int, allowLower bool, o ops) {
	if b, err := o.readFile(scoreFile); err == nil && !allowLower {
		if cur, ok := atoi(trimSpace(string(b))); ok && want < cur {
			o.write(2, "oomguard-init: keeping oom_score_adj "+itoa(cur)+", not lowering it to "+itoa(want)+" (pass --allow-lower to lower it)")
			return
		}
	}
	if err := o.writeFile(scoreFile, []byte(itoa(want)+"\n")); err != nil {
		why := err.Error()
		if err == syscall.EACCES || err == syscall.EPERM {
			why += " (lowering the score needs CAP_SYS_RESOURCE)"
		}
		o.write(2, "oomguard-init: cannot set oom_score_adj to "+itoa(want)+": "+why)
	}
}

// setGroup writes memory.oom.group of the shim's own cgroup v2 cgroup. It is
// best effort: most containers see /sys/fs/cgroup read-only.
func setGroup(on bool, o ops) {
	b, err := o.readFile("/proc/self/cgroup")
	if err != nil {
		o.write(2, "oomguard-init: memory.oom.group skipped: cannot read /proc/self/cgroup: "+err.Error())
		return
	}
	cg, ok := unifiedPath(string(b))
	if !ok {
		o.write(2, "oomguard-init: memory.oom.group skipped: not on cgroup v2")
		return
	}
	file := "/sys/fs/cgroup" + cg + "/memory.oom.group"
	if cg == "/" {
		file = "/sys/fs/cgroup/memory.oom.group"
	}
	val := "0\n"
	if on {
		val = "1\n"
	}
	if err := o.writeFile(file, []byte(val)); err != nil {
		why := err.Error()
		if err == syscall.EROFS {
			why = "read-only cgroup filesystem"
		}
		o.write(2, "oomguard-init: memory.oom.group skipped: "+file+": "+why)
	}
}

// unifiedPath returns the path on the "0::" line of /proc/self/cgroup.
func unifiedPath(s string) (string, bool) {
	for len(s) > 0 {
		line := s
		if i := indexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if len(line) > 3 && line[:3] == "0::" {
			return line[3:], true
		}
	}
	return "", false
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath finds a target without a '/' in PATH, as a shell would.
func lookPath(target, pathEnv string, o ops) (string, error) {
	if target == "" {
		return "", syscall.ENOENT
	}
	if indexByte(target, '/') >= 0 {
		return target, nil
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	var firstErr error = syscall.ENOENT
	for pathEnv != "" {
		dir := pathEnv
		if i := indexByte(pathEnv, ':'); i >= 0 {
			dir, pathEnv = pathEnv[:i], pathEnv[i+1:]
		} else {
			pathEnv = ""
		}
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + target
		err := o.access(p)
		if err == nil {
			return p, nil
		}
		if err != syscall.ENOENT && err != syscall.ENOTDIR && firstErr == syscall.ENOENT {
			firstErr = err
		}
	}
	return "", firstErr
}

// sysOps is the real system.
type sysOps struct{}

func (sysOps) readFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 4096)
	n, err := syscall.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func (sysOps) writeFile(path string, data []byte) error {
	// O_CLOEXEC: the descriptor must not leak into the init we exec.
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = syscall.Write(fd, data)
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	return err
}

func (sysOps) exec(path string, argv, env []string) error { return syscall.Exec(path, argv, env) }

// access reports whether path is executable, as a shell's PATH search checks.
// The raw faccessat: syscall.Access carries an emulation of flags we never pass.
func (sysOps) access(path string) error {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	const atFDCWD, xOK = -100, 1
	fd := atFDCWD
	if _, _, e := syscall.Syscall(syscall.SYS_FACCESSAT, uintptr(fd), uintptr(unsafe.Pointer(p)), xOK); e != 0 {
		return e
	}
	return nil
}

func (sysOps) write(fd int, msg string) { syscall.Write(fd, []byte(msg+"\n")) }
