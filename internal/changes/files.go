package changes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// missing is the directories leading to the node's path p that do not
// exist, outermost first. One reached through a link to what the root does
// not show is refused, not created.
func (s *Set) missing(p string) ([]string, error) {
	var missing []string
	for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
		if s.Exists(d) {
			break
		}
		h, viaLink, err := s.Linked(d)
		if err != nil {
			return nil, err
		}
		if viaLink {
			return nil, fmt.Errorf("%s is reached through a link to %s, which %s does not show: change nothing there, or mount it", d, strings.TrimPrefix(h, s.root), s.root)
		}
		missing = append(missing, d)
	}
	slices.Reverse(missing)
	return missing, nil
}

func (s *Set) addDir(d string) {
	if !slices.Contains(s.rec.Dirs, d) {
		s.rec.Dirs = append(s.rec.Dirs, d)
	}
}

// mkdir creates the node's directory d, remembering it for Rollback when
// this run created it.
func (s *Set) mkdir(d string) error {
	if slices.Contains(s.made, d) {
		return nil
	}
	return s.with(d, false, func(pl *place) error {
		made, err := pl.mkdir()
		if made {
			s.made = append(s.made, d)
		}
		return err
	})
}

// mkdirs creates the directories leading to the node's file p that do not
// exist, recording each before it is made.
func (s *Set) mkdirs(p string) error {
	missing, err := s.missing(p)
	if err != nil {
		return err
	}
	for _, d := range missing {
		s.addDir(d)
		if err := s.persist(); err != nil {
			return err
		}
		if err := s.mkdir(d); err != nil {
			return err
		}
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
	var st os.FileInfo
	var old []byte
	pl, err := s.at(p, true)
	if err == nil {
		defer pl.close()
		if st, err = pl.stat(); err == nil {
			old, err = pl.read(int64(max(len(data), MaxFile)))
		}
	}
	switch {
	case err == nil:
		if err := pl.writeLike(data, st); err != nil {
			return err
		}
		s.undo = append(s.undo, func() error { return s.with(p, true, func(pl *place) error { return pl.writeLike(old, st) }) })
	case errors.Is(err, os.ErrNotExist):
		if viaLink && !s.Exists(filepath.Dir(p)) {
			return fmt.Errorf("%s is reached through a link to %s, which %s does not show: change nothing there, or mount it", p, strings.TrimPrefix(h, s.root), s.root)
		}
		if err := s.mkdirs(p); err != nil {
			return err
		}
		if err := s.with(p, true, func(pl *place) error { return pl.write(data, mode) }); err != nil {
			return err
		}
		s.undo = append(s.undo, func() error { return ignoreMissing(s.with(p, true, (*place).remove)) })
	default:
		return err
	}
	return nil
}

// readlink is where the node's link p leads.
func (s *Set) readlink(p string) (t string, err error) {
	err = s.with(p, false, func(pl *place) error { t, err = pl.readlink(); return err })
	return t, err
}

func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// holds reports whether the node's file p holds exactly data.
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
	if t, err := s.readlink(p); err == nil && t == target {
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
		return fmt.Errorf("link %s: %w", p, err)
	}
	pl, err := s.at(p, false)
	if err != nil {
		return fmt.Errorf("link %s: %w", p, err)
	}
	defer pl.close()
	old, oldErr := pl.readlink()
	if st, err := pl.stat(); err == nil && st.Mode()&os.ModeSymlink == 0 {
		return fmt.Errorf("%s exists and is not a link: leaving it alone; remove it and run again", p)
	}
	pl.remove()
	if err := pl.symlink(target); err != nil {
		return err
	}
	s.undo = append(s.undo, func() error {
		return s.with(p, false, func(pl *place) error {
			pl.remove()
			if oldErr == nil {
				return pl.symlink(old)
			}
			return nil
		})
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
	pl, err := s.at(p, true)
	var st os.FileInfo
	if err == nil {
		defer pl.close()
		st, err = pl.stat()
	}
	if errors.Is(err, os.ErrNotExist) {
		return s.WriteFile(p, updated, 0o644)
	}
	if err != nil {
		return err
	}
	old, err := pl.read(MaxFile)
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
		if s.rec.Backups == nil {
			s.rec.Backups = map[string]string{}
		}
		s.rec.Backups[p] = backup
		if err := s.persist(); err != nil {
			return err
		}
		if err := s.with(backup, true, func(pl *place) error { return pl.writeLike(old, st) }); err != nil {
			return err
		}
		s.undo = append(s.undo, func() error { return ignoreMissing(s.with(backup, true, (*place).remove)) })
		fmt.Fprintf(s.out, "backed up %s to %s\n", p, backup)
	}
	if s.rec.Written == nil {
		s.rec.Written = map[string]string{}
	}
	s.rec.Written[p] = "sha256:" + sum(updated)
	if err := s.persist(); err != nil {
		return err
	}
	if err := pl.writeLike(updated, st); err != nil {
		return err
	}
	s.undo = append(s.undo, func() error { return s.with(p, true, func(pl *place) error { return pl.writeLike(old, st) }) })
	s.changed = true
	fmt.Fprintf(s.out, "%s %s\n", verb, p)
	return nil
}
