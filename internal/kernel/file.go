// Package kernel reads and writes the kernel interfaces oomguard works with:
// procfs and cgroupfs on cgroup v1, v2 and hybrid hosts, for both cgroup
// drivers. Every function takes the filesystem root ("/" on a node, "/host"
// in the DaemonSet) so that tests run the same code on a tree.
//
// Every read and write goes through this file, as opencontainers/cgroups'
// file.go: bounded reads that never block (a captured tree may hold a FIFO
// or a link to a device anywhere), writes that never create a file, and
// ParseError for content that is not what the kernel writes. The fast
// process reader (procreader.go) is the one exception, for the doctor's
// tens of thousands of processes.
package kernel

import (
	"bytes"
	"errors"
	"math"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/oomguard/oomguard/internal/safeio"
	"golang.org/x/sys/unix"
)

// Bounds on what is read from /proc and /sys: a file there is small, unless
// a captured tree made it otherwise.
const (
	MaxSmall   = 64 << 10 // a number, a cgroup path, a stat line, a sysctl
	MaxCmdline = 256 << 10
	MaxTable   = 16 << 20 // /proc/interrupts, /proc/stat, cgroup.procs on a large node
)

// ReadFile reads a kernel file of at most limit bytes, never waiting on it,
// on raw system calls: an os.File would try (and fail) to register each
// /proc and /sys file with the poller, two system calls more a file.
func ReadFile(p string, limit int64) ([]byte, error) {
	return readAt(unix.AT_FDCWD, "", p, int(min(limit, int64(math.MaxInt32))))
}

// ReadInt reads a file that holds one integer.
func ReadInt(p string) (int, error) {
	b, err := ReadFile(p, MaxSmall)
	if err != nil {
		return 0, err
	}
	v, ok := ParseInt(b)
	if !ok {
		return 0, &ParseError{Path: p, Err: errors.New(strconv.Quote(string(b)) + " is not a number")}
	}
	return v, nil
}

// WriteFile writes data to an existing file under base (root's /proc or
// cgroup tree): never creating one (a vanished process or cgroup must not
// leave a file behind in a tree) and never waiting on it. A file in a tree
// (not the kernel's own) is truncated as it is opened.
func WriteFile(base, p string, data []byte) error {
	fd, err := syscall.Open(p, writeFlags(!kernelFS(base)), 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	return write(fd, p, data)
}

// writeFlags: the kernel's own files (procfs, cgroupfs, sysfs) take each
// write whole at offset 0, so they are not truncated: on cgroupfs a
// truncation is a setattr under the hierarchy's kernfs lock, on procfs
// 0.7 µs a write here.
func writeFlags(truncate bool) int {
	if truncate {
		return syscall.O_WRONLY | syscall.O_TRUNC | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	}
	return syscall.O_WRONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
}

// kernelFSes remembers, by base directory, what kernelFS found: a node has
// a few (its root's /proc and cgroup tree), a test one per tree.
var kernelFSes sync.Map

// kernelFS reports whether dir is on one of the kernel's own filesystems
// (procfs, cgroupfs, sysfs); not when it cannot tell.
func kernelFS(dir string) bool {
	if k, ok := kernelFSes.Load(dir); ok {
		return k.(bool)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false // not remembered: the directory may not be there yet
	}
	k := false
	switch st.Type {
	case unix.PROC_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.SYSFS_MAGIC:
		k = true
	}
	kernelFSes.Store(dir, k)
	return k
}

// readAt reads name in the directory dirfd holds (dir is its path, for
// errors), up to limit bytes, only if it is a regular file, without blocking.
func readAt(dirfd int, dir, name string, limit int) ([]byte, error) {
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir + name, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: dir + name, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, &os.PathError{Op: "open", Path: dir + name, Err: safeio.ErrNotRegular}
	}
	buf := make([]byte, 512)
	n := 0
	for {
		m, err := syscall.Read(fd, buf[n:])
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: dir + name, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		if n += m; n > limit {
			return nil, &os.PathError{Op: "read", Path: dir + name, Err: safeio.ErrTooLarge}
		}
		if n < len(buf) { // a short read is the end: the kernel's files fill what is asked
			return buf[:n], nil
		}
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
	}
}

// writeAt writes data to the existing file name in the directory dirfd holds.
func writeAt(dirfd int, dir, name string, data []byte, truncate bool) error {
	fd, err := syscall.Openat(dirfd, name, writeFlags(truncate), 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir + name, Err: err}
	}
	return write(fd, dir+name, data)
}

func write(fd int, p string, data []byte) error {
	_, werr := syscall.Write(fd, data)
	cerr := syscall.Close(fd)
	if werr != nil {
		return &os.PathError{Op: "write", Path: p, Err: werr}
	}
	if cerr != nil {
		return &os.PathError{Op: "close", Path: p, Err: cerr}
	}
	return nil
}

// ParseError is a kernel file whose content is not what the kernel writes.
type ParseError struct {
	Path string
	Err  error
}

func (e *ParseError) Error() string { return "parse " + e.Path + ": " + e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// ParseInt parses a decimal integer surrounded by white space, without
// allocating.
func ParseInt(b []byte) (int, bool) {
	b = bytes.TrimSpace(b)
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// KeyValues parses a flat-keyed cgroup file ("key value" a line, as
// memory.events and memory.stat), skipping lines that are not; it reads what
// opencontainers/cgroups' fscommon.ParseKeyValue reads (a test holds them
// equal), without linking that package into the hook.
func KeyValues(b []byte) map[string]uint64 {
	kv := map[string]uint64{}
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte(" "))
		if !ok || len(k) == 0 {
			continue
		}
		v = bytes.TrimSpace(v)
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			kv[string(k)] = n
		} else if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			kv[string(k)] = 0 // a negative count, as fscommon.ParseUint reads it
		}
	}
	return kv
}

// KeyValue is key's value in a flat-keyed cgroup file, as KeyValues reads
// it, without making the map of every key (/proc/vmstat has 180): false
// when no line holds it.
func KeyValue(b []byte, key string) (uint64, bool) {
	var v uint64
	found := false
	for line := range bytes.Lines(b) {
		k, val, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte(" "))
		if !ok || string(k) != key {
			continue
		}
		val = bytes.TrimSpace(val)
		if n, err := strconv.ParseUint(string(val), 10, 64); err == nil {
			v, found = n, true
		} else if _, err := strconv.ParseInt(string(val), 10, 64); err == nil {
			v, found = 0, true // a negative count, as KeyValues reads it
		}
	}
	return v, found
}

// StatusKB is the kB value of a "Key:   N kB" line of a /proc status-format
// file (status, meminfo), 0 when absent.
func StatusKB(b []byte, key string) int64 {
	i := bytes.Index(b, []byte(key))
	for i > 0 && b[i-1] != '\n' { // a key must start a line: Name: is the process's own
		j := bytes.Index(b[i+1:], []byte(key))
		if j < 0 {
			return 0
		}
		i += 1 + j
	}
	if i < 0 {
		return 0
	}
	line := b[i+len(key):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	v, ok := ParseInt(bytes.TrimSuffix(bytes.TrimSpace(line), []byte(" kB")))
	if !ok || v < 0 {
		return 0
	}
	return int64(v)
}

// IsGone reports whether err means the process or cgroup no longer exists:
// ENODEV is what a cgroup file says once its cgroup is being removed.
func IsGone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENODEV)
}
