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
	// victim's own cgroup; paths as the kernel's cgroup root shows them.
	OOMMemcg, TaskMemcg string
	Pid                 int
	Comm                string // as the kernel printed it: escaped, untrusted
	UID                 int
	ScoreAdj            int
	RSSKiB              uint64 // anon + file + shmem
	PgTablesKiB         uint64
	// Group is set on a process killed with the victim because its cgroup
	// (TaskMemcg) has memory.oom.group set: the kernel chose the victim, not it.
	Group bool
}

// Global reports whether the whole node ran out of memory.
func (k Kill) Global() bool { return k.Constraint == "" || k.Constraint == "CONSTRAINT_NONE" }

var (
	oomKillRE = regexp.MustCompile(`^oom-kill:constraint=([A-Z_]+),(.*)$`)
	// The task's name is last but for pid and uid, so a name holding ",pid="
	// cannot move them.
	taskRE   = regexp.MustCompile(`,task=(.*),pid=(\d+),uid=(\d+)$`)
	groupRE  = regexp.MustCompile(`^Tasks in (.*) are going to be killed due to memory\.oom\.group set$`)
	killedRE = regexp.MustCompile(`^(?:Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): Killed process (\d+) \((.*)\) total-vm:(\d+)kB, anon-rss:(\d+)kB, file-rss:(\d+)kB, shmem-rss:(\d+)kB, UID:(\d+) pgtables:(\d+)kB oom_score_adj:(-?\d+)$`)
)

// Parser assembles kills from records in the order the kernel wrote them.
type Parser struct {
	pending *Kill // from the oom-kill line, until its Killed process line
	last    Kill  // the last kill the kernel chose
	// group is the cgroup whose every task the kernel kills with last (its
	// memory.oom.group), until the next oom-kill line or groupWindow.
	group string
}

// groupWindow bounds how long after its "Tasks in … are going to be killed"
// line a Killed process line belongs to that group kill (the kernel kills
// them at once; a later kill whose oom-kill line was rate-limited is not one).
const groupWindow = time.Second

// Feed takes the next record; it returns the kill that record completes.
// Only the kernel's own records count: a process writing /dev/kmsg gets
// another facility than the kernel's 0.
func (p *Parser) Feed(r Record) (Kill, bool) {
	if r.Priority>>3 != 0 {
		return Kill{}, false
	}
	if m := groupRE.FindStringSubmatch(r.Msg); m != nil && p.last.Pid != 0 {
		p.group = m[1]
		p.last.Time = r.Time
		return Kill{}, false
	}
	if m := oomKillRE.FindStringSubmatch(r.Msg); m != nil {
		p.group = ""
		k := &Kill{Constraint: m[1]}
		rest := "," + m[2]
		if t := taskRE.FindStringSubmatchIndex(rest); t != nil {
			k.Comm = rest[t[2]:t[3]]
			k.Pid, _ = strconv.Atoi(rest[t[4]:t[5]])
			k.UID, _ = strconv.Atoi(rest[t[6]:t[7]])
			rest = rest[:t[0]]
		}
		k.OOMMemcg = field(rest, "oom_memcg")
		k.TaskMemcg = field(rest, "task_memcg")
		p.pending = k
		return Kill{}, false
	}
	m := killedRE.FindStringSubmatch(r.Msg)
	if m == nil {
		return Kill{}, false
	}
	var k Kill
	pid, _ := strconv.Atoi(m[1])
	member := p.group != "" && p.pending == nil && r.Time-p.last.Time <= groupWindow
	switch {
	case member && pid == p.last.Pid:
		return Kill{}, false // the victim again, as one of its group
	case member:
		k = Kill{Constraint: p.last.Constraint, OOMMemcg: p.last.OOMMemcg, TaskMemcg: p.group, Group: true}
	case p.pending != nil && p.pending.Pid == pid:
		k = *p.pending
	}
	if !member {
		p.group = ""
	}
	p.pending = nil
	k.Seq, k.Time, k.Pid, k.Comm = r.Seq, r.Time, pid, m[2]
	k.UID, _ = strconv.Atoi(m[7])
	k.ScoreAdj, _ = strconv.Atoi(m[9])
	k.PgTablesKiB, _ = strconv.ParseUint(m[8], 10, 64)
	for _, i := range []int{4, 5, 6} {
		v, _ := strconv.ParseUint(m[i], 10, 64)
		k.RSSKiB += v
	}
	if !member && k.Constraint == "" && strings.HasPrefix(r.Msg, "Memory cgroup out of memory") {
		k.Constraint = "CONSTRAINT_MEMCG"
	}
	if !member {
		p.last = k
	}
	return k, true
}

// field is key's value among the oom-kill line's ",key=value" fields; cgroup
// paths hold no comma the kernel would not also print, so a value ends at
// the next ",key=".
func field(s, key string) string {
	i := strings.Index(s, ","+key+"=")
	if i < 0 {
		return ""
	}
	v := s[i+len(key)+2:]
	if j := strings.Index(v, ","); j >= 0 {
		v = v[:j]
	}
	return v
}

// Reader reads /dev/kmsg from the newest record on.
type Reader struct {
	f   *os.File
	buf []byte
}

// Open opens path (/dev/kmsg) for the records written from now on.
func Open(path string) (*Reader, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if _, err := f.Seek(0, 2); err != nil { // SEEK_END: from the next record on
		f.Close()
		return nil, fmt.Errorf("seek %s: %w", path, err)
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
