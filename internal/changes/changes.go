// Package changes makes changes to a node that can be undone exactly, and
// says what it did: files oomguard owns (a drop-in, a binary, a link), files
// of the node it modifies (backed up first), and values it sets (sysctls:
// the value found first is kept). A record on the node lists them; Undo
// restores what the record lists, leaving alone whatever someone changed
// since. Every operation reports "unchanged …", "would: …" (a dry run) or
// what it did. The runtime installers, the hook installer and the console
// remediation all change the node through it.
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

	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/safeio"
)

// Record is what a Set did to the node, kept as JSON on the node.
type Record struct {
	Files   []string          `json:"files,omitempty"`   // created or owned by oomguard
	Sums    map[string]string `json:"sums,omitempty"`    // owned file → sha256 of what was written, or "-> target" for a link
	Backups map[string]string `json:"backups,omitempty"` // modified file → its backup
	Written map[string]string `json:"written,omitempty"` // modified file → the content left there
	Before  map[string]string `json:"before,omitempty"`  // value → what it was before the first change
	Set     map[string]string `json:"set,omitempty"`     // value → what was set
}

// maxRecord bounds a record: it lists a few files and values.
const maxRecord = 1 << 20

// Set changes files and values below a node's root and records them.
type Set struct {
	root   string
	record string // where the record lives, as a path on the node
	dryRun bool
	out    io.Writer
	rec    Record
	found  bool // the record existed
	// changed is whether something on the node was (or, dry, would be) changed.
	changed bool
}

// Open reads the record at recordPath (a path on the node below root), or
// starts an empty one; dryRun reports what would change without changing it.
func Open(root, recordPath string, dryRun bool, out io.Writer) (*Set, error) {
	s := &Set{root: root, record: recordPath, dryRun: dryRun, out: out}
	b, err := safeio.ReadFile(s.Host(recordPath), maxRecord)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("read oomguard's record of its changes %s: %w", recordPath, err)
	}
	if err := json.Unmarshal(b, &s.rec); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON (%v): undo what it lists by hand and remove it", recordPath, err)
	}
	s.found = true
	return s, nil
}

// Found reports whether the record existed on the node when the Set was opened.
func (s *Set) Found() bool { return s.found }

// Host is p (a path on the node) as this process sees it.
func (s *Set) Host(p string) string { return filepath.Join(s.root, p) }

// Changed reports whether anything on the node was (or would be) changed.
func (s *Set) Changed() bool { return s.changed }

// DryRun reports whether nothing is changed, only reported.
func (s *Set) DryRun() bool { return s.dryRun }

// Out is where the Set reports.
func (s *Set) Out() io.Writer { return s.out }

// Record is what the Set has recorded so far.
func (s *Set) Record() Record { return s.rec }

// Empty reports whether the record lists nothing.
func (s *Set) Empty() bool {
	return len(s.rec.Files) == 0 && len(s.rec.Backups) == 0 && len(s.rec.Set) == 0
}

// Owns reports whether the record lists p as a file oomguard owns.
func (s *Set) Owns(p string) bool { return slices.Contains(s.rec.Files, p) }

// Backup is the backup of a modified file, "" when it has none.
func (s *Set) Backup(p string) string { return s.rec.Backups[p] }

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// WriteFile writes a file oomguard owns, reporting unchanged when it holds data.
func (s *Set) WriteFile(p string, data []byte, mode os.FileMode) error {
	s.own(p, sum(data))
	return s.write(p, data, mode, "wrote")
}

func (s *Set) write(p string, data []byte, mode os.FileMode, verb string) error {
	if old, err := os.ReadFile(s.Host(p)); err == nil && bytes.Equal(old, data) {
		fmt.Fprintf(s.out, "unchanged %s\n", p)
		return nil
	}
	if s.dryRun {
		s.changed = true
		fmt.Fprintf(s.out, "would: %s %s\n", verb, p)
		return nil
	}
	if err := atomicfile.Write(s.Host(p), data, mode); err != nil {
		return err
	}
	s.changed = true
	fmt.Fprintf(s.out, "%s %s\n", verb, p)
	return nil
}

// Symlink makes p a link to target, owned by oomguard.
func (s *Set) Symlink(p, target string) error {
	s.own(p, "-> "+target)
	if t, err := os.Readlink(s.Host(p)); err == nil && t == target {
		fmt.Fprintf(s.out, "unchanged %s -> %s\n", p, target)
		return nil
	}
	if s.dryRun {
		s.changed = true
		fmt.Fprintf(s.out, "would: link %s -> %s\n", p, target)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.Host(p)), 0o755); err != nil {
		return err
	}
	os.Remove(s.Host(p))
	if err := os.Symlink(target, s.Host(p)); err != nil {
		return err
	}
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

// Modify replaces the node's file p with updated. An existing file is backed
// up to p+backupExt once (the first time oomguard changes it); a file that
// did not exist is owned. verb says what the change is, for the report.
func (s *Set) Modify(p string, updated []byte, mode os.FileMode, backupExt, verb string) error {
	old, err := os.ReadFile(s.Host(p))
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.own(p, sum(updated))
	case err != nil:
		return fmt.Errorf("read %s: %w", p, err)
	default:
		if _, done := s.rec.Backups[p]; !done {
			backup := p + backupExt
			if err := s.write(backup, old, mode, "backed up "+p+" to"); err != nil {
				return err
			}
			if s.rec.Backups == nil {
				s.rec.Backups = map[string]string{}
			}
			s.rec.Backups[p] = backup
		}
		if s.rec.Written == nil {
			s.rec.Written = map[string]string{}
		}
		s.rec.Written[p] = string(updated)
	}
	return s.write(p, updated, mode, verb)
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

// SetValue makes v want, recording what it was the first time.
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
	if err := v.Put(want); err != nil {
		return fmt.Errorf("set %s = %s: %w", v.Key, want, err)
	}
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
		s.changed = true
		fmt.Fprintf(s.out, "restored %s = %s\n", v.Key, before)
	}
	delete(s.rec.Set, v.Key)
	delete(s.rec.Before, v.Key)
	return nil
}

// Save writes the record (not in a dry run); an empty record is removed.
func (s *Set) Save() error {
	if s.dryRun {
		return nil
	}
	if s.Empty() {
		if err := os.Remove(s.Host(s.record)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.MarshalIndent(s.rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(s.Host(s.record), append(b, '\n'), 0o644)
}

// Undo restores what the record says was modified and removes what it says
// oomguard owns, each unless it changed since, then the record itself.
// Values are restored by the caller (RestoreValue), which knows how.
func (s *Set) Undo() error {
	var errs []error
	for _, modified := range sortedKeys(s.rec.Backups) {
		backup := s.rec.Backups[modified]
		cur, _ := os.ReadFile(s.Host(modified))
		if string(cur) != s.rec.Written[modified] {
			fmt.Fprintf(s.out, "left %s alone: it changed since install; its original is %s\n", modified, backup)
			continue
		}
		if s.dryRun {
			s.changed = true
			fmt.Fprintf(s.out, "would: restore %s from %s\n", modified, backup)
			continue
		}
		if err := os.Rename(s.Host(backup), s.Host(modified)); err != nil {
			errs = append(errs, err)
			continue
		}
		s.changed = true
		fmt.Fprintf(s.out, "restored %s\n", modified)
	}
	for _, f := range s.rec.Files {
		if _, err := os.Lstat(s.Host(f)); err != nil {
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
		if err := os.Remove(s.Host(f)); err != nil {
			errs = append(errs, err)
			continue
		}
		s.changed = true
		fmt.Fprintf(s.out, "removed %s\n", f)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if _, err := os.Lstat(s.Host(s.record)); err != nil {
		return nil
	}
	if s.dryRun {
		fmt.Fprintf(s.out, "would: remove %s\n", s.record)
		return nil
	}
	if err := os.Remove(s.Host(s.record)); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "removed %s\n", s.record)
	return nil
}

// same reports whether p still holds what was left there (its sum).
func (s *Set) same(p, want string) bool {
	if target, ok := strings.CutPrefix(want, "-> "); ok {
		t, err := os.Readlink(s.Host(p))
		return err == nil && t == target
	}
	b, err := os.ReadFile(s.Host(p))
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
