package oomkills

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
)

// position is where a kernel log reader stopped: after Clean its parser
// held nothing a later record could complete; Reported is the last kill it
// reported. Its successor reads from Clean+1 and reports the kills after
// Reported.
type position struct {
	Boot            string
	Clean, Reported uint64
	// Since is when (the kernel log's clock) the first instance of the
	// chain began reading at the log's end: what was logged before is no
	// instance's to report, even where none has read a record yet.
	Since time.Duration
}

func (p position) String() string {
	return fmt.Sprintf("boot=%s clean=%020d reported=%020d since=%020d\n", p.Boot, p.Clean, p.Reported, p.Since.Microseconds())
}

func parsePosition(s string) (position, bool) {
	var p position
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "boot":
			p.Boot = v
		case "clean":
			p.Clean, err = strconv.ParseUint(v, 10, 64)
		case "reported":
			p.Reported, err = strconv.ParseUint(v, 10, 64)
		case "since":
			var us uint64
			us, err = strconv.ParseUint(v, 10, 63)
			p.Since = time.Duration(us) * time.Microsecond
		default:
			return position{}, false
		}
		if err != nil {
			return position{}, false
		}
	}
	return p, p.Boot != "" || p.Clean > 0 || p.Reported > 0
}

// bootID names this boot of the node: a position from another boot is no
// position in this one's log.
func bootID(root string) string {
	b, err := kernel.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"), kernel.MaxSmall)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// positionFile keeps the holder's position beside the lock: written at each
// kill reported, and as the reader goes on at most once a second (and when
// it stops), so that a successor re-reads at most a second of records
// (their kills not reported again).
type positionFile struct {
	f       *os.File
	pos     position
	written time.Time
	dirty   bool
}

// readPosition is where the last holder stopped in this boot's log, as
// kept in dir.
func readPosition(dir, boot string) (position, bool) {
	b, err := kernel.ReadFile(filepath.Join(dir, "kmsg"), kernel.MaxSmall)
	if err != nil {
		return position{}, false
	}
	p, ok := parsePosition(string(b))
	return p, ok && p.Boot == boot
}

// openPosition keeps the position in dir from start on.
func openPosition(dir string, start position) (*positionFile, error) {
	f, err := os.OpenFile(filepath.Join(dir, "kmsg"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	w := &positionFile{f: f, pos: start}
	return w, w.write()
}

func (w *positionFile) write() error {
	if w == nil {
		return nil
	}
	s := w.pos.String()
	_, err := w.f.WriteAt([]byte(s), 0)
	if err == nil {
		err = w.f.Truncate(int64(len(s)))
	}
	w.written, w.dirty = time.Now(), err != nil
	return err
}

// reported records a kill reported, at once.
func (w *positionFile) reported(seq uint64) {
	if w == nil {
		return
	}
	w.pos.Reported = max(w.pos.Reported, seq)
	w.write()
}

// clean records a record after which the parser was clean.
func (w *positionFile) clean(seq uint64) {
	if w == nil || seq <= w.pos.Clean {
		return
	}
	w.pos.Clean, w.dirty = seq, true
	if time.Since(w.written) >= time.Second {
		w.write()
	}
}

func (w *positionFile) close() {
	if w == nil {
		return
	}
	if w.dirty {
		w.write()
	}
	w.f.Close()
}
