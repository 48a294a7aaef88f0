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
// Open, and restores the record, unless Commit came first. Paths are the
// node's: links are followed as the node would follow them, never above the
// root, and a file reached through a link that leads out of what the root
// shows is refused, not created.
package changes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/safeio"
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
	done   bool // committed or rolled back
	// changed is whether something on the node was (or, dry, would be) changed.
	changed bool
}

// Open reads the record at recordPath (a path on the node below root), or
// starts an empty one; dryRun reports what would change without changing it.
func Open(root, recordPath string, dryRun bool, out io.Writer) (*Set, error) {
	s := &Set{root: root, record: recordPath, dryRun: dryRun, out: out}
	p, err := s.Host(recordPath)
	if err != nil {
		return nil, err
	}
	b, err := safeio.ReadFile(p, maxRecord)
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
func (s *Set) ReadFile(p string, limit int64) ([]byte, error) {
	h, err := s.Host(p)
	if err != nil {
		return nil, err
	}
	return safeio.ReadFile(h, limit)
}

// Exists reports whether p exists on the node.
func (s *Set) Exists(p string) bool {
	h, err := s.Host(p)
	if err != nil {
		return false
	}
	_, err = os.Stat(h)
	return err == nil
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
	p, err := s.Host(s.record)
	if err != nil {
		return err
	}
	if s.Empty() {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if d := filepath.Dir(s.record); !s.Exists(d) && !slices.Contains(s.rec.Dirs, d) {
		s.rec.Dirs = append(s.rec.Dirs, d) // the record's own, removed with it
	}
	b, err := json.MarshalIndent(s.rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(p, append(b, '\n'), 0o600)
}

// Commit ends the transaction: what was changed stays, with its record.
func (s *Set) Commit() error {
	if s.done {
		return nil
	}
	s.done = true
	return s.persist()
}

// Rollback undoes every change made since Open, newest first, and puts the
// record back as Open found it; after Commit it does nothing. Callers defer it.
func (s *Set) Rollback() error {
	if s.done || s.dryRun {
		return nil
	}
	s.done = true
	var errs []error
	for i := len(s.undo) - 1; i >= 0; i-- {
		errs = append(errs, s.undo[i]())
	}
	if len(s.undo) > 0 {
		fmt.Fprintln(s.out, "rolled back what this run changed")
	}
	p, err := s.Host(s.record)
	if err == nil && s.found {
		err = atomicfile.Write(p, s.before, 0o600)
	} else if err == nil {
		if err = os.Remove(p); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	return errors.Join(append(errs, err)...)
}

// mkdirs creates the directories leading to the node's file p that do not
// exist, recording each.
func (s *Set) mkdirs(p string) error {
	var missing []string
	for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
		if s.Exists(d) {
			break
		}
		missing = append(missing, d)
	}
	slices.Reverse(missing)
	for _, d := range missing {
		h, err := s.Host(d)
		if err != nil {
			return err
		}
		if !slices.Contains(s.rec.Dirs, d) {
			s.rec.Dirs = append(s.rec.Dirs, d)
		}
		if err := s.persist(); err != nil {
			return err
		}
		if err := os.Mkdir(h, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		s.undo = append(s.undo, func() error { return ignoreMissing(os.Remove(h)) })
	}
	return nil
}

// put writes data to the node's file p (resolved below the root) with the
// mode and owner of the file it replaces, or mode for a new one, recording
// how to put back what was there.
func (s *Set) put(p string, data []byte, mode os.FileMode) error {
	h, viaLink, err := s.Linked(p)
	if err != nil {
		return err
	}
	st, err := os.Stat(h)
	switch {
	case err == nil:
		old, rerr := safeio.ReadFile(h, int64(max(len(data), MaxFile)))
		if rerr != nil {
			return rerr
		}
		if err := atomicfile.WriteLike(h, data, st); err != nil {
			return err
		}
		s.undo = append(s.undo, func() error { return atomicfile.WriteLike(h, old, st) })
	case errors.Is(err, os.ErrNotExist):
		if viaLink && !s.Exists(filepath.Dir(p)) {
			return fmt.Errorf("%s is reached through a link to %s, which %s does not show: change nothing there, or mount it", p, strings.TrimPrefix(h, s.root), s.root)
		}
		if err := s.mkdirs(p); err != nil {
			return err
		}
		if err := atomicfile.Write(h, data, mode); err != nil {
			return err
		}
		s.undo = append(s.undo, func() error { return ignoreMissing(os.Remove(h)) })
	default:
		return err
	}
	return nil
}

func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// same reports whether the node's file p holds exactly data.
func (s *Set) holds(p string, data []byte) bool {
	old, err := s.ReadFile(p, int64(len(data))+1)
	return err == nil && bytes.Equal(old, data)
}

// BackupExt is what WriteFile appends to the name of a file it found there
// before it, for its backup.
const BackupExt = ".oomguard-backup"

// WriteFile writes a file oomguard owns, reporting unchanged when it holds
// data. A file that was there before it (and is not oomguard's from an
// earlier install) is never owned: it is modified, with a backup, and
// restored at uninstall, never removed.
func (s *Set) WriteFile(p string, data []byte, mode os.FileMode) error {
	if !s.Owns(p) && s.Exists(p) {
		return s.Modify(p, data, BackupExt, "wrote")
	}
	if s.holds(p, data) {
		s.own(p, sum(data))
		fmt.Fprintf(s.out, "unchanged %s\n", p)
		return nil
	}
	s.own(p, sum(data))
	if s.dryRun {
		s.changed = true
		fmt.Fprintf(s.out, "would: write %s\n", p)
		return nil
	}
	if err := s.persist(); err != nil {
		return err
	}
	if err := s.put(p, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	s.changed = true
	fmt.Fprintf(s.out, "wrote %s\n", p)
	return nil
}

// Symlink makes p a link to target, owned by oomguard.
func (s *Set) Symlink(p, target string) error {
	s.own(p, "-> "+target)
	h := filepath.Join(s.root, p)
	if t, err := os.Readlink(h); err == nil && t == target {
		fmt.Fprintf(s.out, "unchanged %s -> %s\n", p, target)
		return nil
	}
	if s.dryRun {
		s.changed = true
		fmt.Fprintf(s.out, "would: link %s -> %s\n", p, target)
		return nil
	}
	if err := s.persist(); err != nil {
		return err
	}
	if err := s.mkdirs(p); err != nil {
		return err
	}
	old, oldErr := os.Readlink(h)
	if st, err := os.Lstat(h); err == nil && st.Mode()&os.ModeSymlink == 0 {
		return fmt.Errorf("%s exists and is not a link: leaving it alone; remove it and run again", p)
	}
	os.Remove(h)
	if err := os.Symlink(target, h); err != nil {
		return err
	}
	s.undo = append(s.undo, func() error {
		os.Remove(h)
		if oldErr == nil {
			return os.Symlink(old, h)
		}
		return nil
	})
	s.changed = true
	fmt.Fprintf(s.out, "linked %s -> %s\n", p, target)
	return nil
}

// Adopt records the file p, holding data, as oomguard's own.
func (s *Set) Adopt(p string, data []byte) { s.own(p, sum(data)) }

func (s *Set) own(p, sum string) {
	if !slices.Contains(s.rec.Files, p) {
		s.rec.Files = append(s.rec.Files, p)
	}
	if s.rec.Sums == nil {
		s.rec.Sums = map[string]string{}
	}
	s.rec.Sums[p] = sum
}

// Modify replaces the node's file p with updated, keeping its mode and
// owner; a link stays a link and the file it leads to is changed. An
// existing file is backed up to p+backupExt once (the first time oomguard
// changes it), as readable as the file itself; a file that did not exist is
// owned. verb says what the change is, for the report.
func (s *Set) Modify(p string, updated []byte, backupExt, verb string) error {
	h, err := s.Host(p)
	if err != nil {
		return err
	}
	st, err := os.Stat(h)
	if errors.Is(err, os.ErrNotExist) {
		return s.WriteFile(p, updated, 0o644)
	}
	if err != nil {
		return err
	}
	old, err := safeio.ReadFile(h, MaxFile)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if bytes.Equal(old, updated) {
		fmt.Fprintf(s.out, "unchanged %s\n", p)
		return nil
	}
	if s.dryRun {
		s.changed = true
		if _, done := s.rec.Backups[p]; !done {
			fmt.Fprintf(s.out, "would: back up %s to %s\n", p, p+backupExt)
		}
		fmt.Fprintf(s.out, "would: %s %s\n", verb, p)
		return nil
	}
	if _, done := s.rec.Backups[p]; !done {
		backup := p + backupExt
		bh, err := s.Host(backup)
		if err != nil {
			return err
		}
		if s.rec.Backups == nil {
			s.rec.Backups = map[string]string{}
		}
		s.rec.Backups[p] = backup
		if err := s.persist(); err != nil {
			return err
		}
		if err := atomicfile.WriteLike(bh, old, st); err != nil {
			return err
		}
		s.undo = append(s.undo, func() error { return ignoreMissing(os.Remove(bh)) })
		fmt.Fprintf(s.out, "backed up %s to %s\n", p, backup)
	}
	if s.rec.Written == nil {
		s.rec.Written = map[string]string{}
	}
	s.rec.Written[p] = "sha256:" + sum(updated)
	if err := s.persist(); err != nil {
		return err
	}
	if err := atomicfile.WriteLike(h, updated, st); err != nil {
		return err
	}
	s.undo = append(s.undo, func() error { return atomicfile.WriteLike(h, old, st) })
	s.changed = true
	fmt.Fprintf(s.out, "%s %s\n", verb, p)
	return nil
}

// Value is a setting of the node that is read and written whole, such as a
// sysctl.
type Value struct {
	Key string // as the record names it, e.g. "vm.oom_dump_tasks"
	Get func() (string, error)
	Put func(string) error
	// Same compares two values as the setting means them; equal strings when nil.
	Same func(a, b string) bool
}

func (v Value) same(a, b string) bool {
	if v.Same != nil {
		return v.Same(a, b)
	}
	return a == b
}

// Before is what the value was before oomguard first set it, if it did.
func (s *Set) Before(key string) (string, bool) { v, ok := s.rec.Before[key]; return v, ok }

// Keys are the values the record says oomguard set.
func (s *Set) Keys() []string {
	keys := make([]string, 0, len(s.rec.Set))
	for k := range s.rec.Set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// SetValue makes v want, recording what it was the first time, before it
// changes it.
func (s *Set) SetValue(v Value, want string) error {
	cur, err := v.Get()
	if err != nil {
		return fmt.Errorf("read %s: %w", v.Key, err)
	}
	if s.rec.Before == nil {
		s.rec.Before, s.rec.Set = map[string]string{}, map[string]string{}
	}
	if _, ok := s.rec.Before[v.Key]; !ok {
		s.rec.Before[v.Key] = cur
	}
	s.rec.Set[v.Key] = want
	if v.same(cur, want) {
		fmt.Fprintf(s.out, "unchanged %s = %s\n", v.Key, cur)
		return nil
	}
	if s.dryRun {
		s.changed = true
		fmt.Fprintf(s.out, "would: set %s = %s (now %s)\n", v.Key, want, cur)
		return nil
	}
	if err := s.persist(); err != nil {
		return err
	}
	if err := v.Put(want); err != nil {
		return fmt.Errorf("set %s = %s: %w", v.Key, want, err)
	}
	s.undo = append(s.undo, func() error { return v.Put(cur) })
	s.changed = true
	fmt.Fprintf(s.out, "set %s = %s (was %s)\n", v.Key, want, cur)
	return nil
}

// RestoreValue puts v back as it was before oomguard set it, unless
// someone changed it since, and forgets it.
func (s *Set) RestoreValue(v Value) error {
	cur, err := v.Get()
	if err != nil {
		return fmt.Errorf("read %s: %w", v.Key, err)
	}
	before, set := s.rec.Before[v.Key], s.rec.Set[v.Key]
	switch {
	case !v.same(cur, set):
		fmt.Fprintf(s.out, "left %s = %s alone: it changed since (oomguard set %s, it was %s)\n", v.Key, cur, set, before)
	case s.dryRun:
		s.changed = true
		fmt.Fprintf(s.out, "would: restore %s = %s\n", v.Key, before)
	default:
		if err := v.Put(before); err != nil {
			return fmt.Errorf("restore %s = %s: %w", v.Key, before, err)
		}
		s.undo = append(s.undo, func() error { return v.Put(cur) })
		s.changed = true
		fmt.Fprintf(s.out, "restored %s = %s\n", v.Key, before)
	}
	delete(s.rec.Set, v.Key)
	delete(s.rec.Before, v.Key)
	return nil
}

// Keep takes p out of what Undo undoes, leaving it as it is (and its
// backup, if any, where it is), and says why.
func (s *Set) Keep(p, why string) {
	how := ""
	if b, ok := s.rec.Backups[p]; ok {
		how = "; its original is " + b
	}
	fmt.Fprintf(s.out, "kept %s: %s%s\n", p, why, how)
	delete(s.rec.Backups, p)
	delete(s.rec.Written, p)
	delete(s.rec.Sums, p)
	s.rec.Files = slices.DeleteFunc(s.rec.Files, func(f string) bool { return f == p })
}

// Undo restores what the record says was modified, removes what it says
// oomguard owns and the directories it created (once empty), each unless it
// changed since, and ends with the record itself. Values are restored by
// the caller (RestoreValue), which knows how.
func (s *Set) Undo() error {
	var errs []error
	for _, modified := range sortedKeys(s.rec.Backups) {
		if err := s.restore(modified, s.rec.Backups[modified]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range s.rec.Files {
		h := filepath.Join(s.root, f)
		if _, err := os.Lstat(h); err != nil {
			continue
		}
		if want, ok := s.rec.Sums[f]; ok && !s.same(f, want) {
			fmt.Fprintf(s.out, "left %s alone: it changed since install\n", f)
			continue
		}
		if s.dryRun {
			s.changed = true
			fmt.Fprintf(s.out, "would: remove %s\n", f)
			continue
		}
		if err := os.Remove(h); err != nil {
			errs = append(errs, err)
			continue
		}
		s.changed = true
		fmt.Fprintf(s.out, "removed %s\n", f)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !s.found {
		return nil
	}
	if s.dryRun {
		fmt.Fprintf(s.out, "would: remove %s\n", s.record)
		return nil
	}
	p, err := s.Host(s.record)
	if err == nil {
		err = ignoreMissing(os.Remove(p))
	}
	if err != nil {
		return err
	}
	s.done = true
	fmt.Fprintf(s.out, "removed %s\n", s.record)
	s.removeDirs()
	return nil
}

// removeDirs removes the directories oomguard created, deepest first, each
// only once empty: someone else's files in one keep it.
func (s *Set) removeDirs() {
	dirs := slices.Clone(s.rec.Dirs)
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") }) // deepest first
	for _, d := range dirs {
		h := filepath.Join(s.root, d)
		if ents, err := os.ReadDir(h); err != nil || len(ents) > 0 {
			continue // gone, or someone else's files are in it now
		}
		if s.dryRun {
			fmt.Fprintf(s.out, "would: remove %s/\n", d)
			continue
		}
		if err := os.Remove(h); err == nil {
			fmt.Fprintf(s.out, "removed %s/\n", d)
		}
	}
}

// restore puts the backup of a modified file back, unless the file changed
// since oomguard wrote it; a link stays a link, its target restored.
func (s *Set) restore(modified, backup string) error {
	h, err := s.Host(modified)
	if err != nil {
		return err
	}
	cur, _ := safeio.ReadFile(h, MaxFile)
	written := s.rec.Written[modified]
	if w, ok := strings.CutPrefix(written, "sha256:"); ok && sum(cur) != w || !ok && string(cur) != written {
		fmt.Fprintf(s.out, "left %s alone: it changed since install; its original is %s\n", modified, backup)
		return nil
	}
	if s.dryRun {
		s.changed = true
		fmt.Fprintf(s.out, "would: restore %s from %s\n", modified, backup)
		return nil
	}
	bh, err := s.Host(backup)
	if err != nil {
		return err
	}
	st, err := os.Stat(bh)
	if err != nil {
		return fmt.Errorf("restore %s: its backup %s: %w", modified, backup, err)
	}
	orig, err := safeio.ReadFile(bh, MaxFile)
	if err != nil {
		return fmt.Errorf("restore %s: its backup %s: %w", modified, backup, err)
	}
	if err := atomicfile.WriteLike(h, orig, st); err != nil {
		return err
	}
	if err := os.Remove(bh); err != nil {
		return err
	}
	s.changed = true
	fmt.Fprintf(s.out, "restored %s\n", modified)
	return nil
}

// same reports whether the owned file p still holds what was left there.
func (s *Set) same(p, want string) bool {
	if target, ok := strings.CutPrefix(want, "-> "); ok {
		t, err := os.Readlink(filepath.Join(s.root, p))
		return err == nil && t == target
	}
	b, err := s.ReadFile(p, MaxFile*16)
	return err == nil && sum(b) == want
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
