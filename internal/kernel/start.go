package kernel

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// ClockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// architecture Linux runs oomguard on.
const ClockTicks = 100

// Started is one process as /proc names it across pid reuse: its pid, comm
// and start (clock ticks after boot).
type Started struct {
	PID   int    `json:"pid"`
	Comm  string `json:"comm"`
	Start uint64 `json:"start"`
}

// ReadStarted reads pid's comm and start from /proc/PID/stat under root.
func ReadStarted(root string, pid int) (Started, error) {
	p := filepath.Join(root, "proc", strconv.Itoa(pid), "stat")
	b, err := ReadFile(p, MaxSmall)
	if err != nil {
		return Started{}, err
	}
	comm, start, err := parseStart(b)
	if err != nil {
		return Started{}, &ParseError{Path: p, Err: err}
	}
	return Started{PID: pid, Comm: comm, Start: start}, nil
}

// parseStart reads comm and starttime, the 20th field after comm, from
// /proc/PID/stat; comm may hold spaces and parentheses.
func parseStart(stat []byte) (string, uint64, error) {
	comm, rest, err := statComm(stat)
	if err != nil {
		return "", 0, err
	}
	f := bytes.Fields(rest)
	if len(f) < 20 {
		return "", 0, errors.New("no starttime")
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("starttime %q: %w", f[19], err)
	}
	return comm, start, nil
}

// Running: the same process still runs (the pid not reused).
func (s Started) Running(root string) bool {
	now, err := ReadStarted(root, s.PID)
	return err == nil && now == s
}

// FindComm is every process under root whose comm is comm, oldest first.
func FindComm(root, comm string) ([]Started, error) {
	pids, err := ListPids(root)
	if err != nil {
		return nil, err
	}
	var out []Started
	for _, pid := range pids {
		s, err := ReadStarted(root, pid)
		if err == nil && s.Comm == comm {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Started) int { return cmp.Compare(a.Start, b.Start) })
	return out, nil
}

// BootTime is when the node booted, /proc/stat's btime.
func BootTime(root string) (time.Time, error) {
	p := filepath.Join(root, "proc", "stat")
	b, err := ReadFile(p, 1<<20)
	if err != nil {
		return time.Time{}, err
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("btime ")); ok {
			if s, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				return time.Unix(s, 0), nil
			}
		}
	}
	return time.Time{}, &ParseError{Path: p, Err: errors.New("no btime")}
}

// StartTime is when s started, given the node's boot time.
func (s Started) StartTime(boot time.Time) time.Time {
	return boot.Add(time.Duration(s.Start) * time.Second / ClockTicks)
}
