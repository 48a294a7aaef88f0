package execwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// The kernel's BTF (/sys/kernel/btf/vmlinux) says where task_struct keeps
// pid and tgid in the running kernel: the fork program reads the child's.
// Format: Documentation/bpf/btf.rst.

const (
	btfMagic      = 0xeb9f
	btfKindStruct = 4
	btfKindUnion  = 5
	maxBTF        = 64 << 20
)

// taskOffsets reads the byte offsets of task_struct's pid and tgid.
func taskOffsets(path string) (pid, tgid int32, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("read the kernel's BTF: %w", err)
	}
	defer f.Close()
	size := int64(1 << 20)
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		size = fi.Size() // read in one buffer: it is megabytes
	}
	b := make([]byte, 0, min(size, maxBTF)+1)
	for len(b) <= maxBTF {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF || n == 0 && err == nil {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read the kernel's BTF: %w", err)
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
	pid, tgid, err = parseTaskOffsets(b)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return pid, tgid, nil
}

var errNoTask = errors.New("no task_struct with pid and tgid in the kernel's BTF")

// btf is BTF data read in place: the types are found by their offsets,
// nothing is copied (the kernel's is megabytes, with 100,000 types).
type btf struct {
	types, strs []byte
	starts      []uint32 // each type's offset in types; type id i+1 is starts[i]
}

// parseTaskOffsets finds task_struct's pid and tgid in BTF data b; every
// length in it is checked against b.
func parseTaskOffsets(b []byte) (pid, tgid int32, err error) {
	le := binary.LittleEndian
	if len(b) < 24 || le.Uint16(b) != btfMagic {
		return 0, 0, errors.New("not BTF (little-endian)")
	}
	hdr := le.Uint32(b[4:])
	typeOff, typeLen, strOff, strLen := le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint32(b[20:])
	section := func(off, n uint32) ([]byte, bool) {
		start, end := uint64(hdr)+uint64(off), uint64(hdr)+uint64(off)+uint64(n)
		if end > uint64(len(b)) {
			return nil, false
		}
		return b[start:end], true
	}
	var t btf
	var ok1, ok2 bool
	t.types, ok1 = section(typeOff, typeLen)
	t.strs, ok2 = section(strOff, strLen)
	if !ok1 || !ok2 {
		return 0, 0, errors.New("BTF sections past its end")
	}
	var tasks []uint32
	for off := uint32(0); int(off)+12 <= len(t.types); {
		kind, vlen, nameOff := t.head(off)
		extra := 0
		switch kind {
		case 1, 14, 17: // INT, VAR, DECL_TAG
			extra = 4
		case 3: // ARRAY
			extra = 12
		case btfKindStruct, btfKindUnion, 15, 19: // STRUCT, UNION, DATASEC, ENUM64
			extra = 12 * vlen
		case 6, 13: // ENUM, FUNC_PROTO
			extra = 8 * vlen
		}
		if int(off)+12+extra > len(t.types) {
			return 0, 0, errors.New("BTF type past its section")
		}
		t.starts = append(t.starts, off)
		if kind == btfKindStruct && t.named(nameOff, "task_struct") {
			tasks = append(tasks, off)
		}
		off += uint32(12 + extra)
	}
	for _, off := range tasks {
		p, ok1 := t.member(off, "pid", 2)
		g, ok2 := t.member(off, "tgid", 2)
		if ok1 && ok2 && p%8 == 0 && g%8 == 0 && p/8 < 1<<20 && g/8 < 1<<20 {
			return int32(p / 8), int32(g / 8), nil
		}
	}
	return 0, 0, errNoTask
}

// head is the kind, vlen and name of the type at off.
func (t *btf) head(off uint32) (kind uint32, vlen int, name uint32) {
	le := binary.LittleEndian
	info := le.Uint32(t.types[off+4:])
	return info >> 24 & 0x1f, int(info & 0xffff), le.Uint32(t.types[off:])
}

// named reports whether the string at off is want.
func (t *btf) named(off uint32, want string) bool {
	if uint64(off)+uint64(len(want)) >= uint64(len(t.strs)) {
		return false
	}
	s := t.strs[off:]
	return string(s[:len(want)]) == want && s[len(want)] == 0
}

// member is the offset in bits of member want of the struct or union at
// off, or of one in its anonymous structs and unions, depth levels down.
func (t *btf) member(off uint32, want string, depth int) (uint32, bool) {
	le := binary.LittleEndian
	kind, vlen, _ := t.head(off)
	if kind != btfKindStruct && kind != btfKindUnion {
		return 0, false
	}
	flag := le.Uint32(t.types[off+4:])>>31 == 1
	for i := 0; i < vlen; i++ {
		m := t.types[off+12+uint32(12*i):]
		name, typ, bits := le.Uint32(m[0:]), le.Uint32(m[4:]), le.Uint32(m[8:])
		if flag {
			bits &= 0xffffff
		}
		if name != 0 && t.named(name, want) {
			return bits, true
		}
		if name == 0 && depth > 0 && typ >= 1 && int(typ) <= len(t.starts) {
			if inner, ok := t.member(t.starts[typ-1], want, depth-1); ok {
				return bits + inner, true
			}
		}
	}
	return 0, false
}
