package changes

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/safeio"
)

// place is a path on the node as a change reaches it: the directory that
// holds it, opened below the root, and its last name there. Every read and
// write of the node goes through one, so that a link swapped in after a
// path was resolved still leads no further than the root.
type place struct {
	dir  *os.File // an O_PATH handle
	name string
	host string // dir/name as this process sees it, for messages
}

// at opens the directory that holds the node's path p, its links followed
// as the node would follow them and never above the root; follow also
// follows a link that p itself is, so that what it leads to is changed.
func (s *Set) at(p string, follow bool) (*place, error) {
	rel := filepath.Clean("/" + p)
	if follow {
		h, err := s.Host(rel)
		if err != nil {
			return nil, err
		}
		r, err := filepath.Rel(s.root, h)
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return nil, fmt.Errorf("resolve %s below %s: it leads to %s", p, s.root, h)
		}
		rel = filepath.Join("/", r)
	}
	if rel == "/" {
		return nil, fmt.Errorf("%s is the root %s itself, not a file in it", p, s.root)
	}
	dir, err := securejoin.OpenInRoot(s.root, filepath.Dir(rel))
	if err != nil {
		return nil, fmt.Errorf("open %s below %s: %w", filepath.Dir(rel), s.root, err)
	}
	return &place{dir: dir, name: filepath.Base(rel), host: filepath.Join(s.root, rel)}, nil
}

func (pl *place) close() { pl.dir.Close() }

func (pl *place) fd() int { return int(pl.dir.Fd()) }

func (pl *place) pathError(op string, err error) error {
	return &fs.PathError{Op: op, Path: pl.host, Err: err}
}

// stat is the file itself, a link not followed.
func (pl *place) stat() (os.FileInfo, error) {
	fd, err := unix.Openat(pl.fd(), pl.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pl.pathError("stat", err)
	}
	f := os.NewFile(uintptr(fd), pl.host)
	defer f.Close()
	return f.Stat()
}

// read reads the regular file up to limit bytes, never following a link
// and never waiting on a FIFO or a device.
func (pl *place) read(limit int64) ([]byte, error) {
	fd, err := unix.Openat(pl.fd(), pl.name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pl.pathError("open", err)
	}
	f := os.NewFile(uintptr(fd), pl.host)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, pl.pathError("open", fmt.Errorf("%w (%s)", safeio.ErrNotRegular, kind(st.Mode())))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, pl.pathError("read", err)
	}
	if int64(len(b)) > limit {
		return nil, pl.pathError("read", fmt.Errorf("%w: over %d bytes", safeio.ErrTooLarge, limit))
	}
	return b, nil
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
	case m&fs.ModeSymlink != 0:
		return "a link"
	}
	return m.Type().String()
}

func (pl *place) write(data []byte, mode os.FileMode) error {
	return atomicfile.WriteIn(pl.dir, pl.name, data, mode)
}

func (pl *place) writeLike(data []byte, like os.FileInfo) error {
	return atomicfile.WriteLikeIn(pl.dir, pl.name, data, like)
}

func (pl *place) remove() error {
	if err := unix.Unlinkat(pl.fd(), pl.name, 0); err != nil {
		return pl.pathError("remove", err)
	}
	return nil
}

func (pl *place) readlink() (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(pl.fd(), pl.name, buf)
	if err != nil {
		return "", pl.pathError("readlink", err)
	}
	return string(buf[:n]), nil
}

func (pl *place) symlink(target string) error {
	if err := unix.Symlinkat(target, pl.fd(), pl.name); err != nil {
		return pl.pathError("symlink", err)
	}
	return nil
}

// mkdir creates the directory, reporting false when something was there.
func (pl *place) mkdir() (bool, error) {
	err := unix.Mkdirat(pl.fd(), pl.name, 0o755)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, pl.pathError("mkdir", err)
	}
	return true, nil
}

// rmdir removes the directory if it is empty, reporting whether it did.
func (pl *place) rmdir() bool { return unix.Unlinkat(pl.fd(), pl.name, unix.AT_REMOVEDIR) == nil }

// with runs f on the node's path p, reached as at reaches it.
func (s *Set) with(p string, follow bool, f func(*place) error) error {
	pl, err := s.at(p, follow)
	if err != nil {
		return err
	}
	defer pl.close()
	return f(pl)
}
