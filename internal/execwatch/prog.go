package execwatch

import "encoding/binary"

// A minimal eBPF assembler: the two programs below are all oomguard loads.
// Encoding: include/uapi/linux/bpf.h (struct bpf_insn), instruction-set.rst.

type insn struct {
	code     uint8
	dst, src uint8
	off      int16
	imm      int32
}

const (
	r0, r1, r2, r3, r4, r5, r6, r7 = 0, 1, 2, 3, 4, 5, 6, 7
	fp                             = 10
)

// Opcodes used (class | size/op | mode/source).
const (
	opMovImm   = 0xb7 // BPF_ALU64|BPF_MOV|BPF_K
	opMovReg   = 0xbf // BPF_ALU64|BPF_MOV|BPF_X
	opAddImm   = 0x07 // BPF_ALU64|BPF_ADD|BPF_K
	opRshImm   = 0x77 // BPF_ALU64|BPF_RSH|BPF_K
	opLdImm64  = 0x18 // BPF_LD|BPF_DW|BPF_IMM
	opLdxDW    = 0x79 // BPF_LDX|BPF_MEM|BPF_DW
	opLdxW     = 0x61 // BPF_LDX|BPF_MEM|BPF_W
	opStxDW    = 0x7b // BPF_STX|BPF_MEM|BPF_DW
	opStxW     = 0x63 // BPF_STX|BPF_MEM|BPF_W
	opStW      = 0x62 // BPF_ST|BPF_MEM|BPF_W
	opStDW     = 0x7a // BPF_ST|BPF_MEM|BPF_DW
	opAtomicDW = 0xdb // BPF_STX|BPF_ATOMIC|BPF_DW, imm BPF_ADD
	opJeqImm   = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
	opJneImm   = 0x55 // BPF_JMP|BPF_JNE|BPF_K
	opJneReg   = 0x5d // BPF_JMP|BPF_JNE|BPF_X
	opJa       = 0x05 // BPF_JMP|BPF_JA
	opCall     = 0x85 // BPF_JMP|BPF_CALL
	opExit     = 0x95 // BPF_JMP|BPF_EXIT
)

// Helpers called (enum bpf_func_id).
const (
	helperMapLookup      = 1
	helperKtimeGetNs     = 5
	helperGetPidTgid     = 14
	helperProbeReadKern  = 113
	helperAncestorCgroup = 123
	helperRingbufOutput  = 130
)

// asm builds a program; jumps name labels, resolved by assemble.
type asm struct {
	insns  []insn
	labels map[string]int
	jumps  map[int]string // insn index → label
}

func newAsm() *asm { return &asm{labels: map[string]int{}, jumps: map[int]string{}} }

func (a *asm) emit(i insn)                 { a.insns = append(a.insns, i) }
func (a *asm) label(name string)           { a.labels[name] = len(a.insns) }
func (a *asm) movImm(dst uint8, imm int32) { a.emit(insn{code: opMovImm, dst: dst, imm: imm}) }
func (a *asm) movReg(dst, src uint8)       { a.emit(insn{code: opMovReg, dst: dst, src: src}) }
func (a *asm) addImm(dst uint8, imm int32) { a.emit(insn{code: opAddImm, dst: dst, imm: imm}) }
func (a *asm) rshImm(dst uint8, imm int32) { a.emit(insn{code: opRshImm, dst: dst, imm: imm}) }
func (a *asm) call(helper int32)           { a.emit(insn{code: opCall, imm: helper}) }
func (a *asm) exit()                       { a.emit(insn{code: opExit}) }
func (a *asm) ldxDW(dst, src uint8, off int16) {
	a.emit(insn{code: opLdxDW, dst: dst, src: src, off: off})
}
func (a *asm) ldxW(dst, src uint8, off int16) {
	a.emit(insn{code: opLdxW, dst: dst, src: src, off: off})
}
func (a *asm) stxDW(dst uint8, off int16, src uint8) {
	a.emit(insn{code: opStxDW, dst: dst, src: src, off: off})
}
func (a *asm) stxW(dst uint8, off int16, src uint8) {
	a.emit(insn{code: opStxW, dst: dst, src: src, off: off})
}
func (a *asm) stW(dst uint8, off int16, imm int32) {
	a.emit(insn{code: opStW, dst: dst, off: off, imm: imm})
}
func (a *asm) stDW(dst uint8, off int16, imm int32) {
	a.emit(insn{code: opStDW, dst: dst, off: off, imm: imm})
}

// ldMap loads a map's fd as the pseudo map reference the kernel resolves.
func (a *asm) ldMap(dst uint8, fd int) {
	a.emit(insn{code: opLdImm64, dst: dst, src: 1 /* BPF_PSEUDO_MAP_FD */, imm: int32(fd)})
	a.emit(insn{})
}

func (a *asm) jmp(code uint8, dst, src uint8, imm int32, to string) {
	a.jumps[len(a.insns)] = to
	a.emit(insn{code: code, dst: dst, src: src, imm: imm})
}

// assemble resolves the jumps and encodes the program.
func (a *asm) assemble() []byte {
	b := make([]byte, 0, 8*len(a.insns))
	for i, in := range a.insns {
		if to, ok := a.jumps[i]; ok {
			in.off = int16(a.labels[to] - i - 1)
		}
		b = append(b, in.code, in.dst&0xf|in.src<<4)
		b = binary.LittleEndian.AppendUint16(b, uint16(in.off))
		b = binary.LittleEndian.AppendUint32(b, uint32(in.imm))
	}
	return b
}

// Event records the programs write to the ring buffer.
const (
	recExec = 1
	recFork = 2
	recSize = 32 // kind u32, pid u32, parent u32, pad u32, cgroup u64, time u64
)

// maxLevel is how deep in the cgroup tree a watched cgroup may be.
const maxLevel = 16

// Stack layout: the record at fp-48, scratch above it.
const (
	stRec    = -48
	stID     = -8
	stLostK  = -52
	stChildP = -56
)

// matchCgroup jumps to "hit" when the current task is under a watched
// cgroup (its id then at fp+stID), else exits.
func (a *asm) matchCgroup(watched int) {
	for level := int32(1); level <= maxLevel; level++ {
		a.movImm(r1, level)
		a.call(helperAncestorCgroup)
		a.jmp(opJeqImm, r0, 0, 0, "out") // past the task's own depth
		a.stxDW(fp, stID, r0)
		a.movReg(r2, fp)
		a.addImm(r2, stID)
		a.ldMap(r1, watched)
		a.call(helperMapLookup)
		a.jmp(opJneImm, r0, 0, 0, "hit")
	}
	a.jmp(opJa, 0, 0, 0, "out")
}

// output writes the record at fp+stRec to the ring, counting it in lost
// when the ring is full, and exits.
func (a *asm) output(ring, lost int) {
	a.ldxDW(r1, fp, stID)
	a.stxDW(fp, stRec+16, r1)
	a.call(helperKtimeGetNs)
	a.stxDW(fp, stRec+24, r0)
	a.ldMap(r1, ring)
	a.movReg(r2, fp)
	a.addImm(r2, stRec)
	a.movImm(r3, recSize)
	a.movImm(r4, 0)
	a.call(helperRingbufOutput)
	a.jmp(opJeqImm, r0, 0, 0, "out")
	a.stW(fp, stLostK, 0)
	a.ldMap(r1, lost)
	a.movReg(r2, fp)
	a.addImm(r2, stLostK)
	a.call(helperMapLookup)
	a.jmp(opJeqImm, r0, 0, 0, "out")
	a.movImm(r1, 1)
	a.emit(insn{code: opAtomicDW, dst: r0, src: r1}) // lock *(u64 *)(r0 + 0) += r1
	a.label("out")
	a.movImm(r0, 0)
	a.exit()
}

// execProgram is attached to sched_process_exec: the task that exec'd,
// when under a watched cgroup.
func execProgram(watched, ring, lost int) []byte {
	a := newAsm()
	a.matchCgroup(watched)
	a.label("hit")
	a.call(helperGetPidTgid)
	a.rshImm(r0, 32)
	a.stW(fp, stRec, recExec)
	a.stxW(fp, stRec+4, r0)
	a.stDW(fp, stRec+8, 0)
	a.output(ring, lost)
	return a.assemble()
}

// forkProgram is attached to sched_process_fork (parent, child): a new
// process (not a thread) forked by a task under a watched cgroup, whose
// pid and tgid it reads from the child's task_struct at the offsets BTF
// gave.
func forkProgram(watched, ring, lost int, offPid, offTgid int32) []byte {
	a := newAsm()
	a.movReg(r6, r1) // ctx: u64 args[]
	a.matchCgroup(watched)
	a.label("hit")
	a.call(helperGetPidTgid)
	a.rshImm(r0, 32)
	a.stxW(fp, stRec+8, r0) // parent
	a.stW(fp, stRec+12, 0)
	a.ldxDW(r7, r6, 8) // child task_struct *
	a.movReg(r1, fp)
	a.addImm(r1, stChildP)
	a.movImm(r2, 4)
	a.movReg(r3, r7)
	a.addImm(r3, offPid)
	a.call(helperProbeReadKern)
	a.movReg(r1, fp)
	a.addImm(r1, stRec+4)
	a.movImm(r2, 4)
	a.movReg(r3, r7)
	a.addImm(r3, offTgid)
	a.call(helperProbeReadKern)
	a.ldxW(r1, fp, stChildP)
	a.ldxW(r2, fp, stRec+4)
	a.jmp(opJneReg, r1, r2, 0, "out") // a thread
	a.stW(fp, stRec, recFork)
	a.output(ring, lost)
	return a.assemble()
}
