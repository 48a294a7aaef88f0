package execwatch

import (
	"encoding/binary"
	"testing"
)

func TestTaskOffsetsOfThisKernel(t *testing.T) {
	pid, tgid, err := taskOffsets("/sys/kernel/btf/vmlinux")
	if err != nil {
		t.Skip(err)
	}
	t.Logf("task_struct: pid at %d, tgid at %d", pid, tgid)
	if tgid != pid+4 {
		t.Errorf("tgid at %d, pid at %d: pid_t tgid follows pid in every kernel", tgid, pid)
	}
}

// btfOf is BTF data with one struct named name with members at the given
// byte offsets, and, nested in an anonymous struct, tgid.
func btfOf(name string, members map[string]uint32) []byte {
	le := binary.LittleEndian
	strs := []byte{0}
	str := func(s string) uint32 {
		off := uint32(len(strs))
		strs = append(append(strs, s...), 0)
		return off
	}
	var types []byte
	typ := func(nameOff, kind, vlen, size uint32, extra ...uint32) {
		types = le.AppendUint32(types, nameOff)
		types = le.AppendUint32(types, kind<<24|vlen)
		types = le.AppendUint32(types, size)
		for _, e := range extra {
			types = le.AppendUint32(types, e)
		}
	}
	typ(str("int"), 1, 0, 4, 32) // type 1: int
	var ms []uint32
	for m, off := range members {
		ms = append(ms, str(m), 1, off*8)
	}
	typ(str(name), btfKindStruct, uint32(len(members)), 4096, ms...) // type 2
	hdr := make([]byte, 24)
	le.PutUint16(hdr, btfMagic)
	hdr[2] = 1
	le.PutUint32(hdr[4:], 24)
	le.PutUint32(hdr[8:], 0)
	le.PutUint32(hdr[12:], uint32(len(types)))
	le.PutUint32(hdr[16:], uint32(len(types)))
	le.PutUint32(hdr[20:], uint32(len(strs)))
	return append(append(hdr, types...), strs...)
}

func TestParseTaskOffsets(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         []byte
		pid, tgid int32
		ok        bool
	}{
		{"task_struct", btfOf("task_struct", map[string]uint32{"state": 24, "pid": 1264, "tgid": 1268}), 1264, 1268, true},
		{"another struct", btfOf("mm_struct", map[string]uint32{"pid": 8, "tgid": 12}), 0, 0, false},
		{"no tgid", btfOf("task_struct", map[string]uint32{"pid": 8}), 0, 0, false},
		{"truncated", btfOf("task_struct", map[string]uint32{"pid": 8, "tgid": 12})[:40], 0, 0, false},
		{"not BTF", []byte("hello, world, this is not BTF at all"), 0, 0, false},
		{"empty", nil, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, tgid, err := parseTaskOffsets(tc.b)
			if (err == nil) != tc.ok || pid != tc.pid || tgid != tc.tgid {
				t.Fatalf("parseTaskOffsets = %d, %d, %v; want %d, %d, ok %v", pid, tgid, err, tc.pid, tc.tgid, tc.ok)
			}
		})
	}
}

func FuzzParseTaskOffsets(f *testing.F) {
	f.Add(btfOf("task_struct", map[string]uint32{"pid": 8, "tgid": 12}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, tgid, err := parseTaskOffsets(b)
		if err == nil && (pid < 0 || tgid < 0 || pid >= 1<<20 || tgid >= 1<<20) {
			t.Fatalf("offsets %d, %d", pid, tgid)
		}
	})
}
