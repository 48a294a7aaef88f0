package oomkills

import (
	"cmp"
	"context"
	"errors"
	"os"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kmsg"
)

// Source is the kernel's log (kmsg.Reader), or a test's.
type Source interface {
	Read() (kmsg.Record, error)
	// SetDeadline makes a Read waiting past t fail with os.ErrDeadlineExceeded.
	SetDeadline(t time.Time) error
	Close() error
}

// OpenKmsg opens the kernel's log at its end, or at its oldest record.
func OpenKmsg(oldest bool) (Source, error) {
	if oldest {
		return kmsg.OpenOldest("/dev/kmsg")
	}
	return kmsg.Open("/dev/kmsg")
}

// How a kill reaches the report: read as the kernel logs it; read after it
// was logged, while no instance read the log (the books of each container
// already hold it, and /proc no longer shows its process); or reported
// already by the instance that held the node's lock before, and read again
// for what later records need of it (a group kill's victim).
type replay int

const (
	live replay = iota
	caughtUp
	reportedBefore
)

// syncWait bounds how long a reader that takes over waits for the runtime
// to tell which containers run, so that the kills it catches up on are
// named.
const syncWait = 5 * time.Second

// Log is the kernel's log a Reporter reads, and where it keeps its place.
type Log struct {
	Open func(oldest bool) (Source, error) // nil: OpenKmsg
	Now  func() time.Duration              // the log's clock; nil: kmsg.Now
	// Position is the directory beside the node's lock where the reader
	// keeps its position for its successor; "" where there is no lock.
	Position string
	// LostWait bounds the wait for the log to go quiet once records were
	// overwritten (0: 5 s); tests shorten it.
	LostWait time.Duration
}

// Watch reports every OOM kill the kernel logs, as it logs it, until ctx
// ends: one log line, a counter by container (or the node-daemon
// counter), and for a container's own limit its largest processes right
// after (Options.Largest).
func (r *Reporter) Watch(ctx context.Context, l Log) {
	open, wait := l.Open, cmp.Or(l.LostWait, lostWait)
	if open == nil {
		open = OpenKmsg
	}
	if r.now = kmsg.Now; l.Now != nil {
		r.now = l.Now
	}
	r.counts.open(r.node().Mode())
	keepCtx, stopKeep := context.WithCancel(ctx)
	kept := make(chan struct{})
	go r.counts.keep(keepCtx, r, kept)
	defer func() { stopKeep(); <-kept; r.counts.close() }()
	// Where the instance that held the node's lock before stopped, in this
	// boot's log: from there, no kill is lost or reported twice.
	boot := bootID(r.root)
	var from position
	resume := false
	if l.Position != "" {
		from, resume = readPosition(l.Position, boot)
	}
	start := r.now() // before the open: what the log holds after it is this chain's
	src, err := open(resume)
	if err != nil {
		r.log.Warn("not reading the kernel log; OOM kills in guarded containers are counted at each verification only", "err", err)
		return
	}
	// Closed when ctx ends, or when Watch returns for another reason.
	srcCtx, closeSrc := context.WithCancel(ctx)
	defer closeSrc()
	go func() { <-srcCtx.Done(); src.Close() }()
	parser := kmsg.Parser{SameProcess: func(pid, tid int) (bool, bool) { return kernel.SameProcess(r.root, pid, tid) }}
	var book killBook
	book.open(r.root)
	var caughtUpTo time.Duration // kills logged before: read after the fact
	if resume {
		select { // the containers, to name the kills caught up on
		case <-r.synced:
		case <-time.After(syncWait):
		case <-ctx.Done():
		}
		r.rebase(&book) // its counts hold the kills until now
		caughtUpTo = r.now()
		r.log.Info("reading the kernel log from where the last instance stopped", "after_record", from.Clean, "last_reported", from.Reported)
	}
	if !resume {
		from = position{Since: start} // read from the log's end: now
	}
	var pw *positionFile
	if l.Position != "" {
		if pw, err = openPosition(l.Position, position{Boot: boot, Clean: from.Clean, Reported: from.Reported, Since: from.Since}); err != nil {
			r.log.Warn("cannot keep the kernel log's position beside the node's lock: the next instance reads from the log's end", "err", err)
			pw = nil
		}
	}
	defer pw.close()
	first := resume
	var lostAt time.Time // records were overwritten then: their kills are told once the log is read up to now
	tellLost := func(t lostTally) {
		lostAt = time.Time{}
		src.SetDeadline(time.Time{})
		r.tellLost(t, &book)
	}
	var ahead *kmsgRead // read while the kills lost were counted: handled first
	for ctx.Err() == nil {
		var rec kmsg.Record
		var err error
		if ahead != nil {
			rec, err, ahead = ahead.rec, ahead.err, nil
		} else {
			if !lostAt.IsZero() {
				src.SetDeadline(time.Now().Add(lostQuiet))
			}
			rec, err = src.Read()
		}
		switch {
		case errors.Is(err, kmsg.ErrLost):
			r.m.kmsgLost.Inc()
			r.log.Warn("kernel log records were overwritten before oomguard read them; the OOM kills among them are reported by container, from the kernel's counts, once the records left are read")
			switch {
			case src.SetDeadline(time.Now().Add(lostQuiet)) != nil:
				r.rebase(&book) // no quiet to wait for: those kills go untold
			case lostAt.IsZero():
				lostAt = time.Now()
			}
			continue
		case !lostAt.IsZero() && errors.Is(err, os.ErrDeadlineExceeded):
			// Read up to now: the counts hold the kills lost, unless one
			// was logged while they were read (its count may be in them).
			t := r.countLost()
			src.SetDeadline(time.Now().Add(time.Millisecond))
			if next, err := src.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
				ahead = &kmsgRead{next, err}
				continue
			}
			tellLost(t)
			continue
		case err != nil:
			if ctx.Err() == nil {
				r.log.Warn("reading the kernel log failed; OOM kills are no longer reported as they happen", "err", err)
			}
			return
		}
		if first {
			first = false
			if from.Clean > 0 && rec.Seq > from.Clean+1 {
				r.m.kmsgLost.Inc()
				r.log.Warn("kernel log records after where the last instance stopped were overwritten before this one read them; OOM kills among them are not reported",
					"after_record", from.Clean, "oldest_left", rec.Seq)
			}
		}
		if resume && (rec.Seq <= from.Clean || rec.Time < from.Since) {
			continue
		}
		if k, ok := parser.Feed(rec); ok {
			how := live
			switch {
			case resume && k.Seq <= from.Reported:
				how = reportedBefore
			case resume && k.Time < caughtUpTo:
				how = caughtUp
			}
			if r.reportKill(k, &book, how) && how == live {
				book.attributed++
			}
			if how == live {
				book.seen++
				r.settle(&book)
			}
			if how != reportedBefore {
				pw.reported(k.Seq)
			}
		}
		if parser.Clean(rec.Time) {
			pw.clean(rec.Seq)
		}
		// A log never quiet (a process writing it without a pause): read up to now will do.
		if !lostAt.IsZero() && time.Since(lostAt) > wait && r.now()-rec.Time < lostQuiet {
			tellLost(r.countLost())
		}
	}
}

// lostQuiet is how long the log must hold no record unread before the
// kills whose records were overwritten are told: every record left has
// been read then, and the counts hold those kills beside the ones told.
const lostQuiet = 50 * time.Millisecond

// lostWait bounds the wait for that quiet: after it, the kills lost are
// told once a record read is one just logged.
const lostWait = 5 * time.Second

// kmsgRead is one Read's result.
type kmsgRead struct {
	rec kmsg.Record
	err error
}
