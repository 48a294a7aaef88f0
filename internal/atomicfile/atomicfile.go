// Package atomicfile replaces files in one rename, so a runtime reading a
// configuration never sees half of it.
package atomicfile

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Write replaces path in one rename so a runtime never reads half a file.
func Write(path string, data []byte, mode os.FileMode) error {
	return write(path, data, mode, -1, -1)
}

// WriteLike is Write with the mode and owner of like (the file being
// replaced), so that a file holding secrets is never left more readable.
func WriteLike(path string, data []byte, like os.FileInfo) error {
	uid, gid := -1, -1
	if st, ok := like.Sys().(*syscall.Stat_t); ok {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	return write(path, data, like.Mode().Perm(), uid, gid)
}

func write(path string, data []byte, mode os.FileMode, uid, gid int) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	// Mode and owner before the content: a secret is never readable by more.
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if uid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return fmt.Errorf("chown %s: %w", tmp.Name(), err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("install %s: %w", path, err)
	}
	return nil
}

// WriteIn is Write of the file name in the directory dir (a handle; O_PATH
// will do): made and renamed there, following no link, so that what it
// changes is in dir whatever links a path to it holds.
func WriteIn(dir *os.File, name string, data []byte, mode os.FileMode) error {
	return writeIn(dir, name, data, mode, -1, -1)
}

// WriteLikeIn is WriteIn with the mode and owner of like.
func WriteLikeIn(dir *os.File, name string, data []byte, like os.FileInfo) error {
	uid, gid := -1, -1
	if st, ok := like.Sys().(*syscall.Stat_t); ok {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	return writeIn(dir, name, data, like.Mode().Perm(), uid, gid)
}

func writeIn(dir *os.File, name string, data []byte, mode os.FileMode, uid, gid int) (err error) {
	path := filepath.Join(dir.Name(), name)
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("write %s: %q is not a file's name", path, name)
	}
	dirfd := int(dir.Fd())
	var tmp string
	var fd int
	for try := 0; ; try++ {
		tmp = "." + name + "." + strconv.FormatUint(uint64(rand.Uint32()), 10)
		fd, err = unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || try == 100 {
			return fmt.Errorf("write %s: %w", path, &os.PathError{Op: "create", Path: filepath.Join(dir.Name(), tmp), Err: err})
		}
	}
	tmpf := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), tmp))
	defer func() {
		if err != nil {
			unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	// Mode and owner before the content: a secret is never readable by more.
	if err := tmpf.Chmod(mode); err != nil {
		tmpf.Close()
		return fmt.Errorf("chmod %s: %w", tmpf.Name(), err)
	}
	if uid >= 0 {
		if err := tmpf.Chown(uid, gid); err != nil {
			tmpf.Close()
			return fmt.Errorf("chown %s: %w", tmpf.Name(), err)
		}
	}
	if _, err := tmpf.Write(data); err != nil {
		tmpf.Close()
		return fmt.Errorf("write %s: %w", tmpf.Name(), err)
	}
	if err := tmpf.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmpf.Name(), err)
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return fmt.Errorf("install %s: %w", path, &os.LinkError{Op: "rename", Old: tmpf.Name(), New: path, Err: err})
	}
	return nil
}
