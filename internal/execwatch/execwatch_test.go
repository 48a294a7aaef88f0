package execwatch

import (
	"encoding/binary"
	"slices"
	"testing"
)

// event is one netlink message from the connector with a process event.
func event(what uint32, pid, tgid int32) []byte {
	ne := binary.NativeEndian
	data := make([]byte, procEventHeaderLen+8)
	ne.PutUint32(data[0:], what)
	ne.PutUint32(data[procEventHeaderLen:], uint32(pid))
	ne.PutUint32(data[procEventHeaderLen+4:], uint32(tgid))
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
	fork := event(0x1, 50, 50)
	long := slices.Clone(exec)
	binary.NativeEndian.PutUint32(long[0:], uint32(len(long)+100)) // a length past the datagram
	other := slices.Clone(exec)
	binary.NativeEndian.PutUint32(other[nlmsgHdrLen:], 7) // another connector
	neg := event(procEventExec, -5, -5)
	for _, tc := range []struct {
		name string
		b    []byte
		want []int
	}{
		{"one exec: its thread group", exec, []int{40}},
		{"a fork is not an exec", fork, nil},
		{"two messages", append(slices.Clone(exec), event(procEventExec, 61, 61)...), []int{40, 61}},
		{"fork then exec", append(slices.Clone(fork), exec...), []int{40}},
		{"empty", nil, nil},
		{"short header", exec[:10], nil},
		{"short event", exec[:nlmsgHdrLen+cnMsgLen+4], nil},
		{"length past the end", long, nil},
		{"another connector's message", other, nil},
		{"no pid", neg, nil},
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
	f.Add(append(event(0x1, 1, 1), event(procEventExec, 2, 2)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		pids := Parse(b, nil)
		if len(pids) > len(b)/(nlmsgHdrLen+cnMsgLen+procEventHeaderLen+8)+1 {
			t.Fatalf("%d pids from %d bytes", len(pids), len(b))
		}
		for _, p := range pids {
			if p <= 0 {
				t.Fatalf("pid %d", p)
			}
		}
	})
}
