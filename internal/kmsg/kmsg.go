// Package kmsg reads the kernel's log records from /dev/kmsg and recognizes
// the OOM killer's reports in them: the "oom-kill:constraint=…" line that
// names the cgroups and the task, and the "Killed process …" line that gives
// its memory and score. Everything in a record is hostile: a task's name is
// the bytes a process chose (the kernel escapes unprintable ones as \xNN),
// and any process that can write /dev/kmsg can forge lines; records are
// bounded, and a reader that falls behind is told so (ErrLost).
package kmsg

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MaxRecord bounds one record as read (the kernel's are at most 1 KiB of
// text plus its dictionary).
const MaxRecord = 8192

// ErrLost is returned by Read when the kernel overwrote records the reader
// had not read yet; reading goes on with the oldest record still there.
var ErrLost = errors.New("kernel log records were overwritten before they were read")

// Record is one record of the kernel's log.
type Record struct {
	Seq      uint64
	Priority int           // syslog priority (facility<<3 | level)
	Time     time.Duration // since boot (CLOCK_MONOTONIC)
	Msg      string        // the text, as the kernel escaped it
}

// ParseRecord parses one /dev/kmsg record: "PRI,SEQ,TS,FLAGS[,…];MESSAGE"
// and, on following lines, its dictionary (ignored).
func ParseRecord(b []byte) (Record, error) {
	head, msg, ok := bytes.Cut(b, []byte{';'})
	if !ok {
		return Record{}, errors.New("no ';' after the record's header")
	}
	msg, _, _ = bytes.Cut(msg, []byte{'\n'})
	f := strings.Split(string(head), ",")
	if len(f) < 3 {
		return Record{}, fmt.Errorf("header %q: want PRI,SEQ,TS", head)
	}
	pri, err1 := strconv.Atoi(f[0])
	seq, err2 := strconv.ParseUint(f[1], 10, 64)
	ts, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || pri < 0 || ts < 0 {
		return Record{}, fmt.Errorf("header %q: not PRI,SEQ,TS", head)
	}
	return Record{Seq: seq, Priority: pri, Time: time.Duration(ts) * time.Microsecond, Msg: string(msg)}, nil
}

// Kill is one OOM kill as the kernel reported it.
type Kill struct {
	Seq  uint64        // of the "Killed process" record
	Time time.Duration // since boot
	// Constraint is the kernel's: CONSTRAINT_NONE (the node ran out),
	// CONSTRAINT_MEMCG (a cgroup's limit), CONSTRAINT_CPUSET, …; "" when the
	// kernel's oom-kill line was not seen.
	Constraint string
	// OOMMemcg is the cgroup whose limit was met (memcg kills), TaskMemcg the
	// victim's own cgroup; paths as the kernel's cgroup root shows them, set
	// when the kill's oom-kill line reads one way only.
	OOMMemcg, TaskMemcg string
	// Readings are every (oom_memcg, task_memcg) the oom-kill line reads as:
	// the kernel prints cgroup paths as they are, and a pod names its
	// cgroups, so ",task_memcg=/…" in a name reads as another field. More
	// than one: the caller decides which from evidence.
	Readings []Memcgs
	Pid      int
	Comm     string // as the kernel printed it: escaped, untrusted
	UID      int
	ScoreAdj int
	RSSKiB   uint64 // anon + file + shmem
	// PgTablesKiB is the victim's page tables.
	PgTablesKiB uint64
	// Again is a process killed a second time, as one of its own group
	// (Pid and Comm are as first reported): the kernel counted it twice,
	// and it is no new kill. Only a proven repeat is one: the same pid, or
	// a thread /proc shows in a process the group kill printed.
	Again bool
	// MayRepeat are the processes this group kill printed before that this
	// kill, its own, may still repeat through one of their threads: the
	// same figures, and /proc could not tell (at most maxMayRepeat).
	MayRepeat []int
	// GroupOf is the cgroup whose tasks the kernel was killing for
	// memory.oom.group when it printed this kill without an oom-kill line
	// of its own: this kill may be one of that group (killed for the same
	// OOM as the victim before it), or a kill whose oom-kill line the
	// kernel's rate limit dropped (the caller tells).
	GroupOf string
}

// Memcgs is one reading of an oom-kill line's cgroups.
type Memcgs struct{ OOM, Task string }

// Global reports whether the whole node ran out of memory.
func (k Kill) Global() bool { return k.Constraint == "" || k.Constraint == "CONSTRAINT_NONE" }

var (
	oomKillRE = regexp.MustCompile(`^oom-kill:constraint=([A-Z_]+),(.*)$`)
	// The task's pid and uid end the line: a name holding ",pid=" cannot
	// move them.
	taskEndRE = regexp.MustCompile(`,pid=(\d+),uid=(\d+)$`)
	// What precedes the cgroups: the nodes the task may use, as %pbl prints them.
	memsAllowedRE = regexp.MustCompile(`,mems_allowed=[0-9,-]*$`)
	groupRE       = regexp.MustCompile(`^Tasks in (.*) are going to be killed due to memory\.oom\.group set$`)
	killedRE      = regexp.MustCompile(`^(?:Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): Killed process (\d+) \((.*)\) total-vm:(\d+)kB, anon-rss:(\d+)kB, file-rss:(\d+)kB, shmem-rss:(\d+)kB, UID:(\d+) pgtables:(\d+)kB oom_score_adj:(-?\d+)$`)
)

// maxComm bounds a task's name as the kernel escapes it: 15 bytes, each
// at most \xNN.
const maxComm = 15 * 4

// summary is what an oom-kill line says: the constraint, its readings of
// the cgroups, and the victim's pid and uid; ok is false for a line the
// kernel cut short (a record is at most 1 KiB).
type summary struct {
	constraint string
	readings   []Memcgs
	pid, uid   int
}

// parseSummary reads "constraint=C,nodemask=…,cpuset=NAME,mems_allowed=…,
// (oom_memcg=PATH|global_oom),task_memcg=PATH,task=COMM,pid=N,uid=N" every
// way the grammar allows: a memcg kill's oom_memcg holds its task_memcg,
// a global one's task_memcg follows global_oom at once, and each path
// starts at the root.
func parseSummary(msg string) (summary, bool) {
	m := oomKillRE.FindStringSubmatch(msg)
	if m == nil {
		return summary{}, false
	}
	sm := summary{constraint: m[1]}
	rest := "," + m[2]
	end := taskEndRE.FindStringSubmatchIndex(rest)
	if end == nil {
		return sm, true // cut short: the cgroups and the task are unknown
	}
	sm.pid, _ = strconv.Atoi(rest[end[2]:end[3]])
	sm.uid, _ = strconv.Atoi(rest[end[4]:end[5]])
	body := rest[:end[0]]
	memcg := sm.constraint == "CONSTRAINT_MEMCG" // the kernel prints oom_memcg then, else global_oom
	seen := map[Memcgs]bool{}
	add := func(r Memcgs) {
		if !seen[r] {
			seen[r] = true
			sm.readings = append(sm.readings, r)
		}
	}
	for _, k := range indexes(body, ",task=") {
		if len(body)-k-len(",task=") > maxComm {
			continue
		}
		head := body[:k]
		for _, j := range indexes(head, ",task_memcg=") {
			task := head[j+len(",task_memcg="):]
			if !strings.HasPrefix(task, "/") {
				continue
			}
			if !memcg {
				if before, ok := strings.CutSuffix(head[:j], ",global_oom"); ok && memsAllowedRE.MatchString(before) {
					add(Memcgs{Task: task})
				}
				continue
			}
			for _, i := range indexes(head[:j], ",oom_memcg=") {
				oom := head[i+len(",oom_memcg=") : j]
				if memsAllowedRE.MatchString(head[:i]) && strings.HasPrefix(oom, "/") && holds(oom, task) {
					add(Memcgs{OOM: oom, Task: task})
				}
			}
		}
	}
	return sm, true
}

// indexes are the positions of sep in s.
func indexes(s, sep string) []int {
	var out []int
	for i := 0; ; {
		j := strings.Index(s[i:], sep)
		if j < 0 {
			return out
		}
		out = append(out, i+j)
		i += j + 1
	}
}

// holds reports whether cgroup dir is cg or one of its ancestors.
func holds(dir, cg string) bool {
	return dir == "/" || cg == dir || strings.HasPrefix(cg, dir+"/")
}

// Parser assembles kills from records in the order the kernel wrote them.
type Parser struct {
	// SameProcess, when set, tells whether tid is one of the threads of
	// process pid; known is false where it cannot tell (one is gone).
	SameProcess func(pid, tid int) (same, known bool)

	pending *summary // from the oom-kill line, until its Killed process line
	last    Kill     // the last kill the kernel chose
	lastMM  mmFigures
	// prev is the last kill fed, repeats aside: a group's line follows
	// its victim's record at once (oom_kill_process, under the OOM lock).
	prev   Kill
	prevMM mmFigures
	// group is the cgroup whose every task the kernel kills with last (its
	// memory.oom.group), until the next oom-kill line or groupWindow.
	group string
	// printed are the processes reported in this group kill, by their
	// memory's figures (at most maxPrinted).
	printed  map[mmFigures][]Kill
	nPrinted int
}

// mmFigures are what a Killed process line says of the victim's memory,
// the same for every thread of one process.
type mmFigures struct {
	totalVM, anon, file, shmem, pgtables uint64
	uid, scoreAdj                        int
}

// maxPrinted bounds the processes a group kill's repeats are looked for among.
const maxPrinted = 4096

// Clean reports whether the parser holds nothing from the records fed so
// far that a later record could complete, at record time at: a reader that
// stopped where its parser was clean can be taken over by a new parser
// from the next record on, exactly.
func (p *Parser) Clean(at time.Duration) bool {
	// A group's members come within groupWindow of its line (last.Time).
	return p.pending == nil && (p.last.Pid == 0 || at-p.last.Time > groupWindow)
}

// groupWindow bounds how long after its "Tasks in … are going to be killed"
// line a Killed process line may belong to that group kill (the kernel kills
// them at once, holding the OOM lock).
const groupWindow = time.Second

// Feed takes the next record; it returns the kill that record completes
// (or, Again, repeats).
// Only the kernel's own records count: a process writing /dev/kmsg gets
// another facility than the kernel's 0.
func (p *Parser) Feed(r Record) (Kill, bool) {
	if r.Priority>>3 != 0 {
		return Kill{}, false
	}
	if m := groupRE.FindStringSubmatch(r.Msg); m != nil && p.prev.Pid != 0 {
		p.group = m[1]
		// The victim is the kill just before, even one printed in another group's second.
		p.last, p.lastMM = p.prev, p.prevMM
		p.last.Time = r.Time
		p.printed, p.nPrinted = nil, 0
		p.print(p.lastMM, p.last)
		return Kill{}, false
	}
	if sm, ok := parseSummary(r.Msg); ok {
		p.group = ""
		p.pending = &sm
		return Kill{}, false
	}
	m := killedRE.FindStringSubmatch(r.Msg)
	if m == nil {
		return Kill{}, false
	}
	var k Kill
	pid, _ := strconv.Atoi(m[1])
	var mm mmFigures
	mm.totalVM, _ = strconv.ParseUint(m[3], 10, 64)
	mm.anon, _ = strconv.ParseUint(m[4], 10, 64)
	mm.file, _ = strconv.ParseUint(m[5], 10, 64)
	mm.shmem, _ = strconv.ParseUint(m[6], 10, 64)
	mm.uid, _ = strconv.Atoi(m[7])
	mm.pgtables, _ = strconv.ParseUint(m[8], 10, 64)
	mm.scoreAdj, _ = strconv.Atoi(m[9])
	inGroup := p.group != "" && p.pending == nil && r.Time-p.last.Time <= groupWindow
	if inGroup {
		first, ok := p.last, pid == p.last.Pid
		var may []int
		if !ok {
			first, ok, may = p.repeat(pid, mm)
		}
		if ok {
			first.Seq, first.Time, first.Again, first.MayRepeat = r.Seq, r.Time, true, nil
			return first, true
		}
		k = Kill{GroupOf: p.group, MayRepeat: may}
	} else if p.pending != nil && p.pending.pid == pid {
		k = Kill{Constraint: p.pending.constraint, Readings: p.pending.readings}
		if len(k.Readings) == 1 {
			k.OOMMemcg, k.TaskMemcg = k.Readings[0].OOM, k.Readings[0].Task
		}
	}
	if !inGroup {
		p.group, p.printed, p.nPrinted = "", nil, 0
	}
	p.pending = nil
	k.Seq, k.Time, k.Pid, k.Comm = r.Seq, r.Time, pid, m[2]
	k.UID, k.ScoreAdj, k.PgTablesKiB = mm.uid, mm.scoreAdj, mm.pgtables
	k.RSSKiB = mm.anon + mm.file + mm.shmem
	if k.Constraint == "" && strings.HasPrefix(r.Msg, "Memory cgroup out of memory") {
		k.Constraint = "CONSTRAINT_MEMCG"
	}
	if inGroup {
		p.print(mm, k)
	} else {
		p.last, p.lastMM = k, mm
	}
	p.prev, p.prevMM = k, mm
	return k, true
}

// repeat finds the process a group kill's record repeats. The kernel kills
// a group process by process, and one whose leader exits meanwhile may be
// met again: it is printed then through the thread that still holds its
// memory (find_lock_task_mm), with that thread's id and name and the
// process's figures. Equal figures and names do not tell (idle copies of
// one program; another pod's rate-limited kill within the second): a
// record repeats only a process printed with its pid, or one /proc shows
// it a thread of. The others of equal figures that /proc cannot tell of
// are returned in may: the kill is its own, and may still be a repeat.
func (p *Parser) repeat(pid int, mm mmFigures) (first Kill, ok bool, may []int) {
	for _, first := range p.printed[mm] {
		if first.Pid == pid {
			return first, true, nil
		}
		if p.SameProcess != nil {
			if same, known := p.SameProcess(first.Pid, pid); known {
				if same {
					return first, true, nil
				}
				continue
			}
		}
		if len(may) < maxMayRepeat {
			may = append(may, first.Pid)
		}
	}
	return Kill{}, false, may
}

// maxMayRepeat bounds the processes one kill is said to may repeat.
const maxMayRepeat = 8

// print notes a process reported in this group kill.
func (p *Parser) print(mm mmFigures, k Kill) {
	if p.nPrinted >= maxPrinted {
		return
	}
	if p.printed == nil {
		p.printed = map[mmFigures][]Kill{}
	}
	p.printed[mm] = append(p.printed[mm], k)
	p.nPrinted++
}

// Reader reads /dev/kmsg from the newest record on.
type Reader struct {
	f   *os.File
	buf []byte
}

// Open opens path (/dev/kmsg) for the records written from now on.
func Open(path string) (*Reader, error) { return open(path, true) }

// OpenOldest opens path (/dev/kmsg) at the oldest record the kernel still
// holds: a reader that takes over from another skips the records up to
// where that one stopped (their sequence numbers), and reads the rest.
func OpenOldest(path string) (*Reader, error) { return open(path, false) }

func open(path string, end bool) (*Reader, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if end {
		if _, err := f.Seek(0, 2); err != nil { // SEEK_END: from the next record on
			f.Close()
			return nil, fmt.Errorf("seek %s: %w", path, err)
		}
	}
	return &Reader{f: f, buf: make([]byte, MaxRecord)}, nil
}

// Read returns the next record, waiting for it; ErrLost when records were
// overwritten unread (call again to go on).
func (r *Reader) Read() (Record, error) {
	for {
		n, err := r.f.Read(r.buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			return Record{}, ErrLost
		case errors.Is(err, syscall.EINVAL):
			continue // a record larger than the buffer: skipped
		case err != nil:
			return Record{}, err
		}
		rec, err := ParseRecord(r.buf[:n])
		if err != nil {
			continue
		}
		return rec, nil
	}
}

// SetDeadline makes a Read waiting past t fail with os.ErrDeadlineExceeded
// (the zero time: none).
func (r *Reader) SetDeadline(t time.Time) error { return r.f.SetReadDeadline(t) }

// Close ends a Read waiting.
func (r *Reader) Close() error { return r.f.Close() }

// Now is the time since boot on CLOCK_MONOTONIC, which the kernel's record
// stamps (its scheduler clock) follow within milliseconds: Now() -
// Record.Time is about how long ago it logged one.
func Now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
