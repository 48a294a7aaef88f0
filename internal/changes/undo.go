package changes

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

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
		if err := s.with(f, false, func(pl *place) error { _, err := pl.stat(); return err }); err != nil {
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
		if err := s.with(f, false, (*place).remove); err != nil {
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
	if err := s.removeRecord(); err != nil {
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
		s.with(d, false, func(pl *place) error {
			if pl.rmdir() { // else gone, or someone else's files are in it now
				fmt.Fprintf(s.out, "removed %s/\n", d)
			}
			return nil
		})
	}
}

// restore puts the backup of a modified file back, unless the file changed
// since oomguard wrote it; a link stays a link, its target restored.
func (s *Set) restore(modified, backup string) error {
	cur, _ := s.ReadFile(modified, MaxFile)
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
	var st os.FileInfo
	var orig []byte
	err := s.with(backup, true, func(pl *place) (err error) {
		if st, err = pl.stat(); err == nil {
			orig, err = pl.read(MaxFile)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("restore %s: its backup %s: %w", modified, backup, err)
	}
	if err := s.with(modified, true, func(pl *place) error { return pl.writeLike(orig, st) }); err != nil {
		return fmt.Errorf("restore %s: %w", modified, err)
	}
	if err := s.with(backup, true, (*place).remove); err != nil {
		return fmt.Errorf("restore %s: remove its backup %s: %w", modified, backup, err)
	}
	s.changed = true
	fmt.Fprintf(s.out, "restored %s\n", modified)
	return nil
}

// same reports whether the owned file p still holds what was left there.
func (s *Set) same(p, want string) bool {
	if target, ok := strings.CutPrefix(want, "-> "); ok {
		t, err := s.readlink(p)
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
