package changes

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every write stays below the root, whatever links the tree holds: /etc/d
// links out of the root relatively ("../../o/d"), which the node would
// resolve to its own /o/d, here also present, so that nothing but how the
// write itself follows the link tells the two apart.
func TestWritesStayBelowRoot(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(t *testing.T, root string) // before the link is made
		op   func(s *Set) error
	}{
		{"write a file", nil, func(s *Set) error { return s.WriteFile("/etc/d/new.conf", []byte("ours\n"), 0o644) }},
		{"make a link", nil, func(s *Set) error { return s.Symlink("/etc/d/link.conf", "/etc/d/new.conf") }},
		{"modify a file", nil, func(s *Set) error { return s.Modify("/etc/d/f.conf", []byte("changed\n"), ".bak", "edited") }},
		{"undo a file, its directory since linked out", func(t *testing.T, root string) {
			s, _ := open(t, root, false)
			if err := s.WriteFile("/etc/d/f.conf", []byte("theirs\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(); err != nil {
				t.Fatal(err)
			}
		}, func(s *Set) error { return s.Undo() }},
		{"undo a link, its directory since linked out", func(t *testing.T, root string) {
			s, _ := open(t, root, false)
			if err := s.Symlink("/etc/d/link.conf", "/etc/d/f.conf"); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(); err != nil {
				t.Fatal(err)
			}
		}, func(s *Set) error { return s.Undo() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, outside := filepath.Join(base, "r"), filepath.Join(base, "o")
			for _, dir := range []string{filepath.Join(outside, "d"), filepath.Join(root, "o", "d")} {
				write(t, dir, "f.conf", "theirs\n")
				os.Symlink("/etc/d/f.conf", filepath.Join(dir, "link.conf"))
			}
			os.MkdirAll(filepath.Join(root, "etc", "d"), 0o755)
			if tc.prep != nil {
				tc.prep(t, root)
			}
			os.RemoveAll(filepath.Join(root, "etc", "d"))
			if err := os.Symlink("../../o/d", filepath.Join(root, "etc", "d")); err != nil {
				t.Fatal(err)
			}
			before := files(t, outside)
			s, out := open(t, root, false)
			err := tc.op(s)
			if err == nil {
				err = s.Commit()
			}
			s.Rollback()
			if after := files(t, outside); !maps.Equal(after, before) {
				t.Fatalf("a write left the root (error %v):\nbefore %v\nafter  %v\n%s", err, before, after, out)
			}
		})
	}
}

// files is every file, directory and link below dir: its mode and content, or its target.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, dir)
		st, err := d.Info()
		switch {
		case err != nil:
			return err
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "-> " + l
		case d.IsDir():
			m[rel] = st.Mode().String()
		default:
			b, _ := os.ReadFile(p)
			m[rel] = st.Mode().String() + " " + string(b)
		}
		return nil
	})
	return m
}
