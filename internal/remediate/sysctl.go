package remediate

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/safeio"
)

// readSysctl is /proc/sys/KEY below root, trimmed.
func readSysctl(root, key string) (string, error) {
	f, err := openSysctl(root, key, unix.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, kernel.MaxSmall+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if len(b) > kernel.MaxSmall {
		return "", fmt.Errorf("read %s: %w: over %d bytes", f.Name(), safeio.ErrTooLarge, kernel.MaxSmall)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeSysctl sets /proc/sys/KEY below root, in place, as sysctl(8) does.
func writeSysctl(root, key, value string) error {
	f, err := openSysctl(root, key, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(value + "\n"))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write %s: %w", f.Name(), werr)
	}
	return nil
}

// openSysctl opens /proc/sys/KEY below root one name at a time, following
// no link: a node's /proc/sys holds none, and one in a tree given as the
// node's root leads where that root does not, now or by the time of a write.
func openSysctl(root, key string, flag int) (*os.File, error) {
	names := append([]string{"proc", "sys"}, strings.Split(strings.ReplaceAll(key, ".", "/"), "/")...)
	for _, n := range names {
		if n == "" || n == "." || n == ".." {
			return nil, fmt.Errorf("%q is not the name of a sysctl", key)
		}
	}
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	walked := "/"
	for _, n := range names[:len(names)-1] {
		fd, err := unix.Openat(dir, n, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			err = linkError(dir, n, path.Join(walked, n), root, err)
			unix.Close(dir)
			return nil, err
		}
		unix.Close(dir)
		dir, walked = fd, path.Join(walked, n)
	}
	n := names[len(names)-1]
	walked = path.Join(walked, n)
	host := filepath.Join(root, walked)
	// Looked at before it is opened, so that a FIFO or a device is not opened
	// at all; O_NONBLOCK for one swapped in since.
	fd, err := unix.Openat(dir, n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		err = regular(fd, host)
		unix.Close(fd)
	}
	if err == nil {
		fd, err = unix.Openat(dir, n, flag|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		err = linkError(dir, n, walked, root, err)
	}
	unix.Close(dir)
	if err != nil {
		return nil, err
	}
	if err := regular(fd, host); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), host), nil
}

var kinds = map[uint32]string{unix.S_IFREG: "", unix.S_IFIFO: "a FIFO", unix.S_IFCHR: "a character device", unix.S_IFBLK: "a block device",
	unix.S_IFSOCK: "a socket", unix.S_IFDIR: "a directory", unix.S_IFLNK: "a link"}

// regular refuses what fd holds unless it is a regular file.
func regular(fd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if kind, ok := kinds[st.Mode&unix.S_IFMT]; !ok || kind != "" {
		return &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", safeio.ErrNotRegular, cmp.Or(kind, "of an unknown kind"))}
	}
	return nil
}

// linkError says why opening name in dir failed: a link where the node has
// none, or err.
func linkError(dir int, name, nodePath, root string, err error) error {
	buf := make([]byte, unix.PathMax)
	n, lerr := unix.Readlinkat(dir, name, buf)
	var pe *os.PathError
	switch {
	case lerr == nil:
	case errors.As(err, &pe):
		return err
	default:
		return &os.PathError{Op: "open", Path: filepath.Join(root, nodePath), Err: err}
	}
	return fmt.Errorf("%s is a link to %s below %s: a node's /proc/sys holds no links, and oomguard reads and writes no sysctl through one; give --root the node's own root, with its /proc mounted", nodePath, buf[:n], root)
}
