package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/version"
)

// Two instances of the plugin on one node are harmless. They meet during a
// rollout with surge (the new pod connects before the old one leaves: NRI
// takes two plugins of one name and index, every release from 0.6 to
// 0.12) and for the moment a restarted worker starts beside its pod's
// other instance. What must happen once on a node is done by the instance
// that holds the node's lock, an open-file-description lock on
// <root>/run/oomguard-nri/lock, which the kernel frees when its holder
// exits however it exits: reporting the OOM kills (the log line, the
// counters, the Events), the verifier and the exec watcher, the writes a
// reload or an update makes, Synchronize's fixes, the metrics port and the
// node's condition. An instance that does not hold it stands by: it is
// connected, Ready, decides every container it is told of, and writes a
// new container's values at StartContainer only when the holder runs the
// same rules (configuration and release) — those writes are then the same
// values, each written only where the file holds another (read, compare,
// write), so two instances writing them is one instance writing them —
// or when no instance holds the lock. It never reverts what the holder
// set. It takes the lock within pollLock of its holder's exit, fixes every
// container it knows to its own rules, and reads the kernel's log from the
// record after the last one its predecessor reported (the records carry
// sequence numbers, and the position is kept beside the lock).

// lockDir is where the node's lock and the kernel log's position are kept,
// under the plugin's root (the node's /run: gone at reboot).
const lockDir = "run/oomguard-nri"

// pollLock is how often an instance standing by tries the lock.
const pollLock = 50 * time.Millisecond

// nodeLock is the node's lock, and what its holder leaves beside it.
type nodeLock struct {
	dir string
	f   *os.File // the lock file, open for the process's life
}

func openNodeLock(root string) (*nodeLock, error) {
	dir := filepath.Join(root, lockDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	l := &nodeLock{dir: dir, f: f}
	if _, err := l.heldElsewhere(); err != nil { // OFD locks: Linux 3.15
		f.Close()
		return nil, err
	}
	return l, nil
}

func wholeFile(typ int16) *unix.Flock_t { return &unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0} }

// tryLock takes the lock unless another instance holds it.
func (l *nodeLock) tryLock() (bool, error) {
	err := unix.FcntlFlock(l.f.Fd(), unix.F_OFD_SETLK, wholeFile(unix.F_WRLCK))
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	return err == nil, err
}

// heldElsewhere reports whether another instance (another open file
// description: another process, or another plugin of this process) holds
// the lock.
func (l *nodeLock) heldElsewhere() (bool, error) {
	flk := wholeFile(unix.F_WRLCK)
	if err := unix.FcntlFlock(l.f.Fd(), unix.F_OFD_GETLK, flk); err != nil {
		return false, err
	}
	return flk.Type != unix.F_UNLCK, nil
}

// close lets the lock go: the next instance takes it.
func (l *nodeLock) close() { l.f.Close() }

// announce says which rules the holder runs, for the instances standing by.
func (l *nodeLock) announce(rules string) error {
	tmp := filepath.Join(l.dir, ".holder.tmp")
	if err := os.WriteFile(tmp, []byte(rules+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(l.dir, "holder"))
}

// holderRules are the rules the holder announced; ok false when no instance
// holds the lock.
func (l *nodeLock) holderRules() (rules string, ok bool) {
	if held, err := l.heldElsewhere(); err != nil || !held {
		return "", false
	}
	b, err := kernel.ReadFile(filepath.Join(l.dir, "holder"), kernel.MaxSmall)
	if err != nil {
		return "", true // held, not announced yet: not known to agree
	}
	return strings.TrimSpace(string(b)), true
}

// rulesOf names what decides a container: the configuration's text and the
// release reading it. Two instances with the same write the same values.
func rulesOf(hash string) string {
	return fmt.Sprintf("config=%s release=%s commit=%s", hash, version.Version, version.Commit)
}

// mayWrite reports whether this instance writes a new container's values:
// it holds the node's lock, or the holder runs its rules, or none holds it.
func (p *Plugin) mayWrite() bool {
	if !p.standby.Load() || p.lock == nil {
		return true
	}
	rules, held := p.lock.holderRules()
	return !held || rules == rulesOf(p.cfg.Load().Hash)
}

// announce tells the instances standing by which rules the holder runs.
func (p *Plugin) announce() {
	if p.lock == nil || p.standby.Load() {
		return
	}
	if err := p.lock.announce(rulesOf(p.cfg.Load().Hash)); err != nil {
		p.log.Warn("cannot say which rules this instance runs beside the node's lock; an instance standing by leaves new containers to it", "err", err)
	}
}

// takeLock takes the node's lock at the start, or stands by; it returns
// whether this instance stands by.
func (p *Plugin) takeLock() bool {
	l, err := openNodeLock(p.root)
	if err != nil {
		p.log.Warn("no node lock: this instance acts as the node's only one (two on a node would both report each OOM kill)", "dir", filepath.Join(p.root, lockDir), "err", err)
		return false
	}
	p.lock = l
	ok, err := l.tryLock()
	if err != nil {
		p.log.Warn("the node's lock cannot be taken: this instance acts as the node's only one", "err", err)
		l.close()
		p.lock = nil
		return false
	}
	if ok {
		p.m.lockHeld.Set(1)
		p.announce()
		return false
	}
	p.standby.Store(true)
	p.log.Info("another oomguard-nri holds the node's lock (a rollout's other pod): standing by until it leaves; new containers are set here only while it runs the same rules")
	return true
}

// waitLock waits, standing by, until this instance holds the node's lock;
// false when ctx ends first.
func (p *Plugin) waitLock(ctx context.Context) bool {
	t := time.NewTicker(pollLock)
	defer t.Stop()
	for {
		if ok, err := p.lock.tryLock(); ok {
			return true
		} else if err != nil {
			p.log.Warn("trying the node's lock failed; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// takeOver makes this instance the node's: it says which rules it runs,
// and sets every container it knows to them (the one that held the lock
// may have run other rules, and containers started meanwhile may have
// been left to it).
func (p *Plugin) takeOver() {
	start := time.Now()
	p.standby.Store(false)
	p.m.lockHeld.Set(1)
	p.announce()
	gs := p.reg.guards()
	fixed := 0
	for _, g := range gs {
		c, err := p.container(g, "takeover")
		if err != nil {
			continue
		}
		if n, group := p.fix(g, c, "takeover"); n > 0 || group {
			fixed++
		}
	}
	p.reconcileSoon()
	p.log.Info("took the node's lock: this instance reports the node's OOM kills and keeps its containers", "containers", len(gs), "fixed", fixed,
		"duration", time.Since(start).Round(time.Microsecond))
}
