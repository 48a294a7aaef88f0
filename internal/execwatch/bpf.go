package execwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Filtered is the kernel's exec and process-fork events filtered in the
// kernel: two eBPF programs on the sched_process_exec and
// sched_process_fork tracepoints pass on only the tasks under a cgroup
// it watches (cgroup v2), so an exec elsewhere on the node costs oomguard
// nothing. It needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), a kernel
// with BTF and ring buffers (5.8 and later).
type Filtered struct {
	// mu holds Close off while Read reads the ring: a plugin stopping
	// closes the source from another goroutine while its reader may be in
	// Read, and the ring must not be unmapped under it.
	mu                  sync.Mutex
	watched, ring, lost int   // maps
	links               []int // the programs' attachments (their fds hold them)
	epfd                int
	cons                []byte // the consumer position, read-write
	data                []byte // the producer position, then the ring twice
	mask                uint64
	lastLost            uint64
}

// ringSize is the ring's data: 8,192 records.
const ringSize = 256 << 10

// maxWatched bounds the cgroups watched: the node's containers.
const maxWatched = 16384

// OpenFiltered loads and attaches the programs.
func OpenFiltered() (*Filtered, error) {
	offPid, offTgid, err := taskOffsets("/sys/kernel/btf/vmlinux")
	debug.FreeOSMemory() // the BTF read, megabytes, is not kept
	if err != nil {
		return nil, err
	}
	f := &Filtered{watched: -1, ring: -1, lost: -1, epfd: -1}
	fail := func(what string, err error) (*Filtered, error) {
		f.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if f.watched, err = mapCreate(unix.BPF_MAP_TYPE_HASH, 8, 1, maxWatched, "oomguard_cgs"); err != nil {
		return fail("create the watched cgroups' map", err)
	}
	if f.ring, err = mapCreate(unix.BPF_MAP_TYPE_RINGBUF, 0, 0, ringSize, "oomguard_ring"); err != nil {
		return fail("create the ring buffer", err)
	}
	if f.lost, err = mapCreate(unix.BPF_MAP_TYPE_ARRAY, 4, 8, 1, "oomguard_lost"); err != nil {
		return fail("create the lost count", err)
	}
	for _, p := range []struct {
		tp   string
		code []byte
	}{
		{"sched_process_exec", execProgram(f.watched, f.ring, f.lost)},
		{"sched_process_fork", forkProgram(f.watched, f.ring, f.lost, offPid, offTgid)},
	} {
		prog, err := progLoad(p.code)
		if err != nil {
			return fail("load the program for "+p.tp, err)
		}
		link, err := rawTracepointOpen(p.tp, prog)
		unix.Close(prog) // the attachment holds it
		if err != nil {
			return fail("attach to "+p.tp, err)
		}
		f.links = append(f.links, link)
	}
	page := os.Getpagesize()
	if f.cons, err = unix.Mmap(f.ring, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail("map the ring's consumer page", err)
	}
	if f.data, err = unix.Mmap(f.ring, int64(page), page+2*ringSize, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return fail("map the ring", err)
	}
	f.mask = ringSize - 1
	if f.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail("epoll", err)
	}
	if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, f.ring, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(f.ring)}); err != nil {
		return fail("epoll", err)
	}
	return f, nil
}

// Watch passes on the events of the tasks under the cgroup whose id (its
// directory's inode number on cgroup v2) is id.
func (f *Filtered) Watch(id uint64) error {
	one := uint8(1)
	return mapUpdate(f.watched, unsafe.Pointer(&id), unsafe.Pointer(&one))
}

// Unwatch stops passing on the cgroup's events.
func (f *Filtered) Unwatch(id uint64) {
	attr := mapElemAttr{mapFD: uint32(f.watched), key: unsafe.Pointer(&id)}
	bpf(unix.BPF_MAP_DELETE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
}

// Read waits for events and appends them to evs; it returns after
// pollInterval without any, and ErrLost (with evs) when the ring was full.
func (f *Filtered) Read(evs []Event) ([]Event, error) {
	f.mu.Lock()
	epfd, wait := f.epfd, f.cons != nil && len(evs) == 0 && !f.pending()
	f.mu.Unlock()
	if epfd < 0 {
		return evs, errClosed
	}
	if wait { // a Close meanwhile ends the wait within pollInterval
		ev := make([]unix.EpollEvent, 1)
		if _, err := unix.EpollWait(epfd, ev, int(pollInterval.Milliseconds())); err != nil && !errors.Is(err, unix.EINTR) {
			return evs, fmt.Errorf("wait on the ring buffer: %w", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cons == nil {
		return evs, errClosed
	}
	cons := (*uint64)(unsafe.Pointer(&f.cons[0]))
	prod := (*uint64)(unsafe.Pointer(&f.data[0]))
	ring := f.data[os.Getpagesize():]
	c := atomic.LoadUint64(cons)
	for p := atomic.LoadUint64(prod); c < p; {
		hdr := (*uint32)(unsafe.Pointer(&ring[c&f.mask]))
		n := atomic.LoadUint32(hdr)
		if n&(1<<31) != 0 { // being written
			break
		}
		size := uint64(n&^(3<<30)) + 8
		if n&(1<<30) == 0 && n&^(3<<30) >= recSize {
			rec := ring[(c+8)&f.mask:]
			evs = appendRecord(evs, rec[:recSize])
		}
		c += (size + 7) &^ 7
		atomic.StoreUint64(cons, c)
	}
	if n := f.lostCount(); n > f.lastLost {
		f.lastLost = n
		return evs, ErrLost
	}
	return evs, nil
}

// pending reports whether the ring holds records not read yet.
func (f *Filtered) pending() bool {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&f.cons[0]))) < atomic.LoadUint64((*uint64)(unsafe.Pointer(&f.data[0])))
}

func appendRecord(evs []Event, r []byte) []Event {
	ne := binary.NativeEndian
	pid, parent := int(int32(ne.Uint32(r[4:]))), int(int32(ne.Uint32(r[8:])))
	e := Event{Pid: pid, Cgroup: ne.Uint64(r[16:]), Time: durationNs(ne.Uint64(r[24:]))}
	switch ne.Uint32(r) {
	case recExec:
	case recFork:
		e.Parent = parent
	default:
		return evs
	}
	if e.Pid <= 0 || e.Parent < 0 {
		return evs
	}
	return append(evs, e)
}

// lostCount is the records the ring had no room for, in all.
func (f *Filtered) lostCount() uint64 {
	var key uint32
	var n uint64
	attr := mapElemAttr{mapFD: uint32(f.lost), key: unsafe.Pointer(&key), value: unsafe.Pointer(&n)}
	bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	return n
}

// errClosed is Read's error once the source is closed.
var errClosed = errors.New("exec events: closed")

// Close detaches the programs and frees the maps; a Read meanwhile returns.
func (f *Filtered) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.links {
		unix.Close(l)
	}
	f.links = nil
	if f.cons != nil {
		unix.Munmap(f.cons)
	}
	if f.data != nil {
		unix.Munmap(f.data)
	}
	f.cons, f.data = nil, nil
	for _, fd := range []*int{&f.epfd, &f.watched, &f.ring, &f.lost} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	return nil
}

// The bpf(2) calls it makes; attribute layouts from union bpf_attr, its
// pointers (__aligned_u64) held as unsafe.Pointer so that the Go runtime
// keeps them valid (64-bit little-endian machines only).

func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

type mapCreateAttr struct {
	mapType, keySize, valueSize, maxEntries, flags, innerMapFD, numaNode uint32
	name                                                                 [16]byte
}

func mapCreate(typ, key, value, max uint32, name string) (int, error) {
	attr := mapCreateAttr{mapType: typ, keySize: key, valueSize: value, maxEntries: max}
	copy(attr.name[:15], name)
	return bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
}

type mapElemAttr struct {
	mapFD, _   uint32
	key, value unsafe.Pointer
	flags      uint64
}

func mapUpdate(fd int, key, value unsafe.Pointer) error {
	attr := mapElemAttr{mapFD: uint32(fd), key: key, value: value}
	_, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	return err
}

type progLoadAttr struct {
	progType, insnCnt   uint32
	insns, license      unsafe.Pointer
	logLevel, logSize   uint32
	logBuf              unsafe.Pointer
	kernVersion, flags  uint32
	name                [16]byte
	ifindex, attachType uint32
}

// license: the programs are dual-licensed so that the kernel lets them call
// bpf_probe_read_kernel, a GPL-only helper.
var license = []byte("Dual BSD/GPL\x00")

func progLoad(code []byte) (int, error) {
	attr := progLoadAttr{progType: unix.BPF_PROG_TYPE_RAW_TRACEPOINT, insnCnt: uint32(len(code) / 8),
		insns: unsafe.Pointer(&code[0]), license: unsafe.Pointer(&license[0])}
	copy(attr.name[:15], "oomguard_exec")
	fd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err == nil {
		return fd, nil
	}
	// Again with the verifier's log, to say why.
	log := make([]byte, 64<<10)
	attr.logLevel, attr.logSize, attr.logBuf = 1, uint32(len(log)), unsafe.Pointer(&log[0])
	if fd, err2 := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err2 == nil {
		return fd, nil
	}
	end := 0
	for end < len(log) && log[end] != 0 {
		end++
	}
	tail := log[:end]
	if len(tail) > 2048 {
		tail = tail[len(tail)-2048:]
	}
	return -1, fmt.Errorf("%w: %s", err, tail)
}

type rawTracepointAttr struct {
	name      unsafe.Pointer
	progFD, _ uint32
}

func rawTracepointOpen(name string, prog int) (int, error) {
	n := append([]byte(name), 0)
	attr := rawTracepointAttr{name: unsafe.Pointer(&n[0]), progFD: uint32(prog)}
	return bpf(unix.BPF_RAW_TRACEPOINT_OPEN, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
}
