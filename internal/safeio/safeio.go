// Package safeio opens files that something else — a pod, an image, a
// captured node — may have shaped, so that no such file can block a program
// or run it out of memory: only regular files, opened without blocking, and
// read up to a limit.
package safeio

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular, ErrTooLarge, ErrKernelFS and ErrChanged are why a file
// was refused.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("too large")
	ErrKernelFS   = errors.New("a kernel interface, not a file of data")
	ErrChanged    = errors.New("changed while it was read")
)

// ReadFile reads a regular file of at most limit bytes. A FIFO, a device or a
// socket (or a symlink to one) is refused at once, never waited on.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := open(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)}
	}
	return b, nil
}

// Info is the file ReadData read: its identity, size and times, the same
// before and after the read.
type Info struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime int64 // nanoseconds since the epoch; ctime changes with every write
}

// ReadData reads a regular file of data of at most limit bytes, such as a
// configuration file, where ReadFile reads kernel interfaces too. No read of
// it can block: a blocked read syscall cannot be cancelled from Go (a
// deadline would only abandon a goroutine stuck in it for good), so none is
// started that could block. A file on procfs, sysfs or another kernel
// filesystem is refused (its size says nothing, and a read of /proc/kmsg
// waits for the kernel's next message), and no more than the file's size is
// read, nothing from an empty one. A file written while it is read is
// refused with ErrChanged. Reads from a network or FUSE filesystem are only
// bounded in size.
func ReadData(path string, limit int64) ([]byte, Info, error) {
	f, err := open(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, Info{}, err
	}
	defer f.Close()
	fail := func(op string, err error) ([]byte, Info, error) {
		return nil, Info{}, &fs.PathError{Op: op, Path: path, Err: err}
	}
	var sfs syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return fail("statfs", err)
	}
	if name, ok := kernelFS[uint32(sfs.Type)]; ok {
		return fail("open", fmt.Errorf("%w: on %s", ErrKernelFS, name))
	}
	before, err := info(f)
	if err != nil {
		return fail("stat", err)
	}
	if before.Size > limit {
		return fail("read", fmt.Errorf("%w: %d bytes, over %d", ErrTooLarge, before.Size, limit))
	}
	b := make([]byte, before.Size)
	if _, err := io.ReadFull(f, b); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fail("read", fmt.Errorf("%w: shorter than its size", ErrChanged))
	} else if err != nil {
		return fail("read", err)
	}
	after, err := info(f)
	if err != nil {
		return fail("stat", err)
	}
	if after != before {
		return fail("read", ErrChanged)
	}
	return b, before, nil
}

func info(f *os.File) (Info, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return Info{}, err
	}
	return Info{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}, nil
}

// kernelFS are the filesystems (statfs(2) f_type) whose files are kernel
// interfaces: a read may wait on the kernel, or never end.
var kernelFS = map[uint32]string{
	0x9fa0:     "procfs",
	0x62656572: "sysfs",
	0x64626720: "debugfs",
	0x74726163: "tracefs",
	0x73636673: "securityfs",
	0x62656570: "configfs",
	0x27e0eb:   "cgroupfs",
	0x63677270: "cgroup2fs",
	0xcafe4a11: "bpffs",
	0x6165676c: "pstorefs",
	0xde5e81e4: "efivarfs",
	0x1cd1:     "devpts",
	0x42494e4d: "binfmt_misc",
	0x65735543: "fusectl",
	0xf97cff8c: "selinuxfs",
	0x43415d53: "smackfs",
	0x67596969: "rpc_pipefs",
}

// OpenAppend opens a regular file for appending, creating it with perm.
func OpenAppend(path string, perm os.FileMode) (*os.File, error) {
	return open(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
}

func open(path string, flag int, perm os.FileMode) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO must not wait for its other end.
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(st.Mode()))}
	}
	// Back to blocking reads and writes on a regular file, which never wait.
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}
