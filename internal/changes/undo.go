package changes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/safeio"
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
