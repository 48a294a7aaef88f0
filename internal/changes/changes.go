// Package changes makes changes to a node that can be undone exactly, and
// says what it did: files oomguard owns (a drop-in, a binary, a link), files
// of the node it modifies (backed up first, mode and owner kept), values it
// sets (sysctls: the value found first is kept), and the directories it had
// to create. A record on the node lists them; Undo restores what the record
// lists, leaving alone whatever someone changed since. Every operation
// reports "unchanged …", "would: …" (a dry run) or what it did. The runtime
// installers, the hook installer and the console remediation all change the
// node through it.
//
// A Set is a transaction: each change is recorded on the node before it is
// made, and Rollback (deferred by the caller) undoes every change made since
// Open, restores the record and removes the directories it created, unless
// Commit came first. Paths are the node's: links are followed as the node
// would follow them, never above the root, and a file reached through a link
// that leads out of what the root shows is refused, not created. Every read
// and write acts on a name in a directory opened below the root, never
// following a link at that name, so that a link swapped in meanwhile leads
// no further than the root either.
package changes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// Record is what a Set did to the node, kept as JSON on the node.
type Record struct {
	Files   []string          `json:"files,omitempty"`   // created or owned by oomguard
	Sums    map[string]string `json:"sums,omitempty"`    // owned file → sha256 of what was written, or "-> target" for a link
	Backups map[string]string `json:"backups,omitempty"` // modified file → its backup
	// Written is what a modified file held after oomguard: "sha256:HEX"
	// (older records: the content itself, which may have held secrets).
	Written map[string]string `json:"written,omitempty"`
	Before  map[string]string `json:"before,omitempty"` // value → what it was before the first change
	Set     map[string]string `json:"set,omitempty"`    // value → what was set
	Dirs    []string          `json:"dirs,omitempty"`   // directories oomguard created
}

// Bounds on what a Set reads: a record lists a few files and values; a file
// it compares or backs up is a configuration, unless told otherwise.
const (
	maxRecord = 1 << 20
	MaxFile   = 16 << 20
)

// Set changes files and values below a node's root and records them.
type Set struct {
	root   string
	record string // where the record lives, as a path on the node
	dryRun bool
	out    io.Writer
	rec    Record
	found  bool   // the record existed
	before []byte // the record as Open found it, for Rollback
	undo   []func() error
	made   []string // directories this run created, in order, for Rollback
	done   bool     // committed or rolled back
	// changed is whether something on the node was (or, dry, would be) changed.
	changed bool
}

// Open reads the record at recordPath (a path on the node below root), or
// starts an empty one; dryRun reports what would change without changing it.
func Open(root, recordPath string, dryRun bool, out io.Writer) (*Set, error) {
	s := &Set{root: root, record: recordPath, dryRun: dryRun, out: out}
	b, err := s.ReadFile(recordPath, maxRecord)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("read oomguard's record of its changes %s: %w", recordPath, err)
	}
	if err := json.Unmarshal(b, &s.rec); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON (%v): undo what it lists by hand and remove it", recordPath, err)
	}
	s.found, s.before = true, b
	return s, nil
}

// Found reports whether the record existed on the node when the Set was opened.
func (s *Set) Found() bool { return s.found }

// Host is p (a path on the node) as this process sees it: below the root,
// links followed as the node would follow them, never above the root.
func (s *Set) Host(p string) (string, error) {
	h, err := securejoin.SecureJoin(s.root, p)
	if err != nil {
		return "", fmt.Errorf("resolve %s below %s: %w", p, s.root, err)
	}
	return h, nil
}

// Root is the node's filesystem root as this process sees it.
func (s *Set) Root() string { return s.root }

// Linked reports whether reaching p goes through a link, and where it leads.
func (s *Set) Linked(p string) (string, bool, error) {
	h, err := s.Host(p)
	if err != nil {
		return "", false, err
	}
	return h, h != filepath.Join(s.root, p), nil
}

// ReadFile reads the node's file p, following links below the root, up to
// limit bytes, refusing anything but a regular file and never blocking.
func (s *Set) ReadFile(p string, limit int64) (b []byte, err error) {
	err = s.with(p, true, func(pl *place) error { b, err = pl.read(limit); return err })
	return b, err
}

// Exists reports whether p exists on the node.
func (s *Set) Exists(p string) bool {
	f, err := securejoin.OpenInRoot(s.root, p)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// Changed reports whether anything on the node was (or would be) changed.
func (s *Set) Changed() bool { return s.changed }

// DryRun reports whether nothing is changed, only reported.
func (s *Set) DryRun() bool { return s.dryRun }

// Out is where the Set reports.
func (s *Set) Out() io.Writer { return s.out }

// Empty reports whether the record lists nothing.
func (s *Set) Empty() bool {
	return len(s.rec.Files) == 0 && len(s.rec.Backups) == 0 && len(s.rec.Set) == 0 && len(s.rec.Dirs) == 0
}

// Owns reports whether the record lists p as a file oomguard owns.
func (s *Set) Owns(p string) bool { return slices.Contains(s.rec.Files, p) }

// Files are the files the record lists: owned, then modified, sorted.
func (s *Set) Files() []string {
	return slices.Concat(slices.Sorted(slices.Values(s.rec.Files)), sortedKeys(s.rec.Backups))
}

// Backup is the backup of a modified file, "" when it has none.
func (s *Set) Backup(p string) string { return s.rec.Backups[p] }

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// persist writes the record as it now stands: every change is recorded on the
// node before it is made, so that an interrupted run leaves a record that
// undoes what it did.
func (s *Set) persist() error {
	if s.dryRun {
		return nil
	}
	if s.Empty() {
		return s.removeRecord()
	}
	missing, err := s.missing(s.record)
	if err != nil {
		return fmt.Errorf("write oomguard's record of its changes %s: %w", s.record, err)
	}
	for _, d := range missing { // the record's own, removed with it
		s.addDir(d)
		if err := s.mkdir(d); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(s.rec, "", "  ")
	if err != nil {
		return err
	}
	return s.writeRecord(append(b, '\n'))
}

func (s *Set) writeRecord(b []byte) error {
	if err := s.with(s.record, true, func(pl *place) error { return pl.write(b, 0o600) }); err != nil {
		return fmt.Errorf("write oomguard's record of its changes %s: %w", s.record, err)
	}
	return nil
}

func (s *Set) removeRecord() error {
	err := s.with(s.record, true, (*place).remove)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove oomguard's record of its changes %s: %w", s.record, err)
	}
	return nil
}

// Commit ends the transaction: what was changed stays, with its record.
func (s *Set) Commit() error {
	if s.done {
		return nil
	}
	s.done = true
	return s.persist()
}

// Rollback undoes every change made since Open, newest first, puts the
// record back as Open found it and removes the directories the run created
// (the record's own among them) that are empty: the node is as it was.
// After Commit it does nothing. Callers defer it.
func (s *Set) Rollback() error {
	if s.done || s.dryRun {
		return nil
	}
	s.done = true
	var errs []error
	for i := len(s.undo) - 1; i >= 0; i-- {
		errs = append(errs, s.undo[i]())
	}
	if len(s.undo) > 0 || len(s.made) > 0 {
		fmt.Fprintln(s.out, "rolled back what this run changed")
	}
	if s.found {
		errs = append(errs, s.writeRecord(s.before))
	} else {
		errs = append(errs, s.removeRecord())
	}
	for _, d := range slices.Backward(s.made) {
		s.with(d, false, func(pl *place) error { pl.rmdir(); return nil }) // one that holds someone else's file now stays
	}
	return errors.Join(errs...)
}
