package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Watch says which of the files it watches changed, from inotify: cgroup
// v2's memory.events tells when its counts change, so a reader of many
// containers' counts reads only those.
type Watch struct {
	fd  int
	buf []byte
}

// NewWatch opens an inotify instance.
func NewWatch() (*Watch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("open inotify: %w", err)
	}
	return &Watch{fd: fd, buf: make([]byte, 64<<10)}, nil
}

// AddMemoryEvents watches cgroup cg's memory.events (cgroup v2 only).
func (w *Watch) AddMemoryEvents(root string, mode Mode, cg string) (int32, error) {
	if mode != ModeV2 {
		return 0, fmt.Errorf("memory.events on cgroup %s host: %w", mode, ErrUnsupported)
	}
	p := filepath.Join(MemoryCgroupDir(root, mode, cg), "memory.events")
	wd, err := unix.InotifyAddWatch(w.fd, p, unix.IN_MODIFY|unix.IN_DONT_FOLLOW)
	if err != nil {
		return 0, fmt.Errorf("watch %s: %w", p, err)
	}
	return int32(wd), nil
}

// Remove stops watching wd; a file that is gone was unwatched already.
func (w *Watch) Remove(wd int32) { unix.InotifyRmWatch(w.fd, uint32(wd)) }

// ErrOverflow is changes the kernel dropped: they came faster than read.
var ErrOverflow = errors.New("inotify queue overflowed")

// Changed appends the watches whose files changed since it was last
// called to wds, waiting up to wait for the first when there is none. It
// returns ErrOverflow (with wds) when the kernel dropped some: then any
// watched file may have changed.
func (w *Watch) Changed(wds []int32, wait time.Duration) ([]int32, error) {
	if wait > 0 {
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(wait/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
			return wds, fmt.Errorf("poll inotify: %w", err)
		}
	}
	var overflow error
	for {
		n, err := unix.Read(w.fd, w.buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return wds, overflow
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return wds, fmt.Errorf("read inotify: %w", err)
		case n == 0:
			return wds, overflow
		}
		var over bool
		wds, over = parseInotify(w.buf[:n], wds)
		if over {
			overflow = ErrOverflow
		}
	}
}

// parseInotify appends the watch of each event in b to wds (a removed
// watch's too: its file is gone), and reports an overflow event.
func parseInotify(b []byte, wds []int32) ([]int32, bool) {
	overflow := false
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		l := int(binary.NativeEndian.Uint32(b[12:]))
		if mask&unix.IN_Q_OVERFLOW != 0 {
			overflow = true
		} else if wd >= 0 {
			wds = append(wds, wd)
		}
		next := unix.SizeofInotifyEvent + l
		if l < 0 || next > len(b) {
			break
		}
		b = b[next:]
	}
	return wds, overflow
}

// Close closes the inotify instance.
func (w *Watch) Close() error { return unix.Close(w.fd) }

// CgroupID is the id of cgroup cg on cgroup v2 (its directory's inode
// number): what the kernel's eBPF helpers call it.
func CgroupID(root string, mode Mode, cg string) (uint64, error) {
	if mode != ModeV2 {
		return 0, fmt.Errorf("cgroup ids on cgroup %s host: %w", mode, ErrUnsupported)
	}
	var st unix.Stat_t
	p := MemoryCgroupDir(root, mode, cg)
	if err := unix.Lstat(p, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", p, err)
	}
	return st.Ino, nil
}
