package execwatch

import (
	"encoding/binary"
	"slices"
	"testing"
)

// event is one netlink message from the connector with a process event:
// its ids after the header (pid, tgid for an exec; parent's pid and tgid,
// child's pid and tgid for a fork).
func event(what uint32, ids ...int32) []byte {
	ne := binary.NativeEndian
	data := make([]byte, procEventHeaderLen+4*len(ids))
	ne.PutUint32(data[0:], what)
	for i, id := range ids {
		ne.PutUint32(data[procEventHeaderLen+4*i:], uint32(id))
	}
	b := make([]byte, nlmsgHdrLen+cnMsgLen+len(data))
	ne.PutUint32(b[0:], uint32(len(b)))
	c := b[nlmsgHdrLen:]
	ne.PutUint32(c[0:], cnIdxProc)
	ne.PutUint32(c[4:], cnValProc)
	ne.PutUint16(c[16:], uint16(len(data)))
	copy(c[cnMsgLen:], data)
	return b
}

func TestParse(t *testing.T) {
	exec := event(procEventExec, 41, 40)
	fork := event(procEventFork, 40, 40, 50, 50)
	thread := event(procEventFork, 40, 40, 51, 40)
	long := slices.Clone(exec)
	binary.NativeEndian.PutUint32(long[0:], uint32(len(long)+100)) // a length past the datagram
	other := slices.Clone(exec)
	binary.NativeEndian.PutUint32(other[nlmsgHdrLen:], 7) // another connector
	neg := event(procEventExec, -5, -5)
	for _, tc := range []struct {
		name string
		b    []byte
		want []Event
	}{
		{"one exec: its thread group", exec, []Event{{Pid: 40}}},
		{"a fork: the new process and its parent", fork, []Event{{Pid: 50, Parent: 40}}},
		{"a new thread is no process", thread, nil},
		{"two messages", append(slices.Clone(exec), event(procEventExec, 61, 61)...), []Event{{Pid: 40}, {Pid: 61}}},
		{"fork then exec", append(slices.Clone(fork), exec...), []Event{{Pid: 50, Parent: 40}, {Pid: 40}}},
		{"empty", nil, nil},
		{"short header", exec[:10], nil},
		{"short event", exec[:nlmsgHdrLen+cnMsgLen+4], nil},
		{"short fork", fork[:len(fork)-4], nil},
		{"length past the end", long, nil},
		{"another connector's message", other, nil},
		{"no pid", neg, nil},
		{"no parent", event(procEventFork, 0, 0, 50, 50), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Parse(tc.b, nil); !slices.Equal(got, tc.want) {
				t.Fatalf("Parse = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestListenMessage(t *testing.T) {
	b := listenMessage()
	ne := binary.NativeEndian
	if int(ne.Uint32(b)) != len(b) || ne.Uint32(b[nlmsgHdrLen:]) != cnIdxProc || ne.Uint32(b[nlmsgHdrLen+cnMsgLen:]) != procCnMcastListen {
		t.Fatalf("listen message %x", b)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(event(procEventExec, 41, 40))
	f.Add(append(event(procEventFork, 1, 1, 2, 2), event(procEventExec, 2, 2)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs := Parse(b, nil)
		if len(evs) > len(b)/(nlmsgHdrLen+cnMsgLen+procEventHeaderLen+8)+1 {
			t.Fatalf("%d events from %d bytes", len(evs), len(b))
		}
		for _, e := range evs {
			if e.Pid <= 0 || e.Parent < 0 {
				t.Fatalf("event %+v", e)
			}
		}
	})
}
