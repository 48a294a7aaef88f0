// Package execwatch tells which processes exec, and which new processes
// fork, on the node, from the kernel's process connector (netlink,
// CONFIG_PROC_EVENTS): a process exec'd into a container (kubectl exec, an
// exec probe) starts at the score in the container's spec, which oomguard
// does not claim (NRI refuses a container whose field two plugins set), so
// oomguard sets it when it execs, and the processes it forked before that.
// It needs CAP_NET_ADMIN and the node's network namespace: the DaemonSet's
// privileged, host-network pod, or a plugin the runtime launched.
package execwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The connector's ids and operations (include/uapi/linux/connector.h, cn_proc.h).
const (
	cnIdxProc          = 1
	cnValProc          = 1
	procCnMcastListen  = 1
	procEventFork      = 0x00000001
	procEventExec      = 0x00000002
	nlmsgHdrLen        = 16
	cnMsgLen           = 20
	procEventHeaderLen = 16 // what, cpu, timestamp_ns
)

// Watcher is a subscription to the kernel's process events.
type Watcher struct {
	f         *os.File // the socket, non-blocking: waited on in the runtime's poller
	rc        syscall.RawConn
	closed    atomic.Bool
	buf       []byte
	datagrams int // the kernel's, read
}

// Open subscribes to process events.
func Open() (*Watcher, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("open the process connector: %w", err)
	}
	fail := func(what string, err error) (*Watcher, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s the process connector: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return fail("bind", err)
	}
	// A burst of execs overflows the default buffer; what is lost is
	// reported, and the verifier still finds it.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, onlyExecsAndForks()); err != nil {
		return fail("filter", err)
	}
	if err := unix.Sendto(fd, listenMessage(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return fail("subscribe to", err)
	}
	// Waited on in the runtime's poller (epoll), not in a read that blocks
	// a thread: an event wakes the reader and nothing else does. A read
	// blocked in the kernel, timing out each second so that a caller could
	// stop, woke the runtime's monitor thread (sysmon) at every event and
	// every second: half an idle plugin's CPU on a busy cgroup v1 node.
	// Close ends a wait.
	f := os.NewFile(uintptr(fd), "process connector")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("poll the process connector: %w", err)
	}
	return &Watcher{f: f, rc: rc, buf: make([]byte, 64<<10)}, nil
}

// pollInterval bounds a Filtered Read's wait without events: a Close
// meanwhile ends it then.
const pollInterval = time.Second

// ErrLost is events the kernel dropped because they came faster than read.
var ErrLost = errors.New("process events lost: they came faster than they were read")

// Event is one process event: a process (thread group) that exec'd, or a
// new process (not a thread) and the one that forked it.
type Event struct {
	Pid    int // the process that exec'd, or the new one
	Parent int // the process that forked it; 0 for an exec
	// Time is when it happened on the kernel's monotonic clock (Now's).
	Time time.Duration
	// Cgroup is the watched cgroup the process is under (Filtered's
	// events); 0 from the process connector.
	Cgroup uint64
}

func durationNs(ns uint64) time.Duration { return time.Duration(int64(ns)) }

// Now is the kernel's monotonic clock, which events are stamped with.
func Now() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Read waits for the kernel's next message and appends its events to evs,
// and those of the messages that came meanwhile (maxDrain at most): a
// burst of execs is one wake. It returns ErrLost (with evs) when the
// kernel dropped some, and os.ErrClosed once closed, os.ErrDeadlineExceeded
// past SetDeadline's time. Messages from anything but the kernel are
// ignored.
func (w *Watcher) Read(evs []Event) ([]Event, error) {
	got, lost := false, false
	var rerr error
	err := w.rc.Read(func(fd uintptr) bool {
		for range maxDrain {
			n, from, err := unix.Recvfrom(int(fd), w.buf, 0)
			switch {
			case errors.Is(err, unix.EAGAIN):
				return got || lost // nothing yet: wait
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOBUFS): // reported once; what is queued still reads
				lost = true
				continue
			case err != nil:
				rerr = err
				return true
			}
			got = true
			if nl, ok := from.(*unix.SockaddrNetlink); ok && nl.Pid == 0 {
				w.datagrams++
				evs = Parse(w.buf[:n], evs)
			}
		}
		return true
	})
	switch {
	case err != nil && w.closed.Load(): // the poller's own error says "use of closed file"
		return evs, fmt.Errorf("read the process connector: %w", os.ErrClosed)
	case err != nil:
		return evs, fmt.Errorf("read the process connector: %w", err)
	case rerr != nil:
		return evs, fmt.Errorf("read the process connector: %w", rerr)
	case lost:
		return evs, ErrLost
	}
	return evs, nil
}

// maxDrain bounds the messages one Read takes: the first is handled no
// later than that many after it.
const maxDrain = 64

// SetDeadline makes a Read waiting past t return os.ErrDeadlineExceeded;
// the zero time for none.
func (w *Watcher) SetDeadline(t time.Time) error { return w.f.SetReadDeadline(t) }

// Close ends the subscription, and a Read waiting.
func (w *Watcher) Close() error {
	w.closed.Store(true)
	return w.f.Close()
}

// listenMessage asks the connector for process events.
func listenMessage() []byte {
	b := make([]byte, nlmsgHdrLen+cnMsgLen+4)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.NLMSG_DONE)
	ne.PutUint32(b[12:], uint32(unix.Getpid()))
	c := b[nlmsgHdrLen:]
	ne.PutUint32(c[0:], cnIdxProc)
	ne.PutUint32(c[4:], cnValProc)
	ne.PutUint16(c[16:], 4)
	ne.PutUint32(c[cnMsgLen:], procCnMcastListen)
	return b
}

// onlyExecsAndForks is a socket filter that drops, in the kernel, every
// event but execs and forks of processes (not threads): exits, threads,
// renames and the rest never wake oomguard.
func onlyExecsAndForks() *unix.SockFprog {
	// Classic BPF loads words big-endian; the connector writes them native.
	word := func(v uint32) uint32 {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], v)
		return binary.BigEndian.Uint32(b[:])
	}
	const what = nlmsgHdrLen + cnMsgLen
	const childPid, childTgid = what + procEventHeaderLen + 8, what + procEventHeaderLen + 12
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: what},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 5, Jf: 0, K: word(procEventExec)},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 5, K: word(procEventFork)},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: childTgid},
		{Code: unix.BPF_MISC | unix.BPF_TAX},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: childPid},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	}
	return &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
}

// Parse appends the exec and process fork events in a datagram from the
// connector to evs. Anything short, oversized or not the connector's
// process events is skipped: the lengths in it are never trusted beyond b.
func Parse(b []byte, evs []Event) []Event {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			return evs
		}
		msg := b[nlmsgHdrLen:l]
		if len(msg) >= cnMsgLen && ne.Uint32(msg[0:]) == cnIdxProc && ne.Uint32(msg[4:]) == cnValProc {
			data := msg[cnMsgLen:]
			if dl := int(ne.Uint16(msg[16:])); dl <= len(data) {
				data = data[:dl]
			}
			evs = appendEvent(evs, data)
		}
		next := (l + 3) &^ 3 // NLMSG_ALIGN
		if next >= len(b) {
			return evs
		}
		b = b[next:]
	}
	return evs
}

// appendEvent appends the event in one message's data: an exec's thread
// group, or a fork whose child is a process of its own (its pid is its
// thread group's), with the parent's thread group.
func appendEvent(evs []Event, data []byte) []Event {
	ne := binary.NativeEndian
	if len(data) < procEventHeaderLen {
		return evs
	}
	ev, at := data[procEventHeaderLen:], time.Duration(int64(ne.Uint64(data[8:])))
	switch ne.Uint32(data[0:]) {
	case procEventExec:
		if len(ev) >= 8 {
			if tgid := int32(ne.Uint32(ev[4:])); tgid > 0 {
				evs = append(evs, Event{Pid: int(tgid), Time: at})
			}
		}
	case procEventFork:
		if len(ev) >= 16 {
			parent, child, childTgid := int32(ne.Uint32(ev[4:])), int32(ne.Uint32(ev[8:])), int32(ne.Uint32(ev[12:]))
			if parent > 0 && child > 0 && child == childTgid {
				evs = append(evs, Event{Pid: int(child), Parent: int(parent), Time: at})
			}
		}
	}
	return evs
}
