package changes

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func open(t *testing.T, root string, dry bool) (*Set, *strings.Builder) {
	t.Helper()
	var out strings.Builder
	s, err := Open(root, "/etc/oomguard/record.json", dry, &out)
	if err != nil {
		t.Fatal(err)
	}
	return s, &out
}

func read(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func write(t *testing.T, root, p, content string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
	if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A value held in a map, as a sysctl is held by the kernel.
func value(key string, m map[string]string) Value {
	return Value{Key: key, Get: func() (string, error) { return m[key], nil }, Put: func(v string) error { m[key] = v; return nil }}
}

func TestFilesRoundTrip(t *testing.T) {
	root := t.TempDir()
	write(t, root, "/etc/main.conf", "original\n")
	s, out := open(t, root, false)
	if err := s.WriteFile("/etc/d/drop-in.conf", []byte("ours\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Symlink("/etc/link.conf", "/etc/d/drop-in.conf"); err != nil {
		t.Fatal(err)
	}
	if err := s.Modify("/etc/main.conf", []byte("changed\n"), ".bak", "edited"); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if !s.Changed() || read(t, root, "/etc/main.conf.bak") != "original\n" || read(t, root, "/etc/main.conf") != "changed\n" {
		t.Fatalf("after the changes:\n%s", out)
	}
	for _, want := range []string{"wrote /etc/d/drop-in.conf", "linked /etc/link.conf -> /etc/d/drop-in.conf", "backed up /etc/main.conf to /etc/main.conf.bak", "edited /etc/main.conf"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	again, out := open(t, root, false)
	again.WriteFile("/etc/d/drop-in.conf", []byte("ours\n"), 0o644)
	again.Symlink("/etc/link.conf", "/etc/d/drop-in.conf")
	again.Modify("/etc/main.conf", []byte("changed\n"), ".bak", "edited")
	if again.Changed() || strings.Count(out.String(), "unchanged") != 3 {
		t.Fatalf("a second run must change nothing:\n%s", out)
	}

	undo, out := open(t, root, false)
	if err := undo.Undo(); err != nil {
		t.Fatal(err)
	}
	if read(t, root, "/etc/main.conf") != "original\n" || !strings.HasPrefix(read(t, root, "/etc/d/drop-in.conf"), "<") ||
		!strings.HasPrefix(read(t, root, "/etc/oomguard/record.json"), "<") {
		t.Fatalf("undo did not restore the node:\n%s", out)
	}
	if _, err := os.Lstat(filepath.Join(root, "/etc/link.conf")); err == nil {
		t.Fatal("the link is left")
	}
}

// Undo leaves what someone else changed since: an edited drop-in, an edited
// main file (its backup kept), a link pointed elsewhere.
func TestUndoLeavesOthersChanges(t *testing.T) {
	root := t.TempDir()
	write(t, root, "/etc/main.conf", "original\n")
	s, _ := open(t, root, false)
	s.WriteFile("/etc/d/drop-in.conf", []byte("ours\n"), 0o644)
	s.Symlink("/etc/link.conf", "/etc/d/drop-in.conf")
	s.Modify("/etc/main.conf", []byte("changed\n"), ".bak", "edited")
	s.Commit()
	write(t, root, "/etc/d/drop-in.conf", "the operator's\n")
	write(t, root, "/etc/main.conf", "changed, then the operator's\n")
	os.Remove(filepath.Join(root, "/etc/link.conf"))
	os.Symlink("/elsewhere", filepath.Join(root, "/etc/link.conf"))
	undo, out := open(t, root, false)
	if err := undo.Undo(); err != nil {
		t.Fatal(err)
	}
	if read(t, root, "/etc/d/drop-in.conf") != "the operator's\n" || read(t, root, "/etc/main.conf") != "changed, then the operator's\n" ||
		read(t, root, "/etc/main.conf.bak") != "original\n" {
		t.Fatalf("undo changed what the operator changed:\n%s", out)
	}
	if t2, _ := os.Readlink(filepath.Join(root, "/etc/link.conf")); t2 != "/elsewhere" {
		t.Fatalf("link now %q", t2)
	}
	if n := strings.Count(out.String(), "left "); n != 3 {
		t.Fatalf("want three files left alone:\n%s", out)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	root := t.TempDir()
	write(t, root, "/etc/main.conf", "original\n")
	vals := map[string]string{"vm.x": "1"}
	s, out := open(t, root, true)
	s.WriteFile("/etc/d/drop-in.conf", []byte("ours\n"), 0o644)
	s.Modify("/etc/main.conf", []byte("changed\n"), ".bak", "edited")
	s.SetValue(value("vm.x", vals), "0")
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if !s.Changed() || vals["vm.x"] != "1" || read(t, root, "/etc/main.conf") != "original\n" ||
		!strings.HasPrefix(read(t, root, "/etc/d/drop-in.conf"), "<") || !strings.HasPrefix(read(t, root, "/etc/oomguard/record.json"), "<") {
		t.Fatalf("a dry run changed the node:\n%s", out)
	}
	if strings.Count(out.String(), "would: ") != 4 {
		t.Fatalf("want four would-lines:\n%s", out)
	}
}

func TestValues(t *testing.T) {
	root := t.TempDir()
	vals := map[string]string{"vm.x": "1", "vm.y": "7"}
	s, _ := open(t, root, false)
	if err := s.SetValue(value("vm.x", vals), "0"); err != nil {
		t.Fatal(err)
	}
	s.SetValue(value("vm.y", vals), "7")
	s.Commit()
	if vals["vm.x"] != "0" {
		t.Fatal("not set")
	}
	// A second run with another value keeps the first original.
	s, _ = open(t, root, false)
	s.SetValue(value("vm.x", vals), "2")
	s.Commit()
	if b, _ := s.Before("vm.x"); b != "1" {
		t.Fatalf("before = %q, want the first original", b)
	}
	vals["vm.y"] = "8" // someone else's change
	s, out := open(t, root, false)
	for _, k := range s.Keys() {
		if err := s.RestoreValue(value(k, vals)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Undo(); err != nil {
		t.Fatal(err)
	}
	if vals["vm.x"] != "1" || vals["vm.y"] != "8" || !strings.Contains(out.String(), "left vm.y = 8 alone") {
		t.Fatalf("values %v:\n%s", vals, out)
	}
}

func TestBrokenRecord(t *testing.T) {
	root := t.TempDir()
	write(t, root, "/etc/oomguard/record.json", "{not json")
	if _, err := Open(root, "/etc/oomguard/record.json", false, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "by hand") {
		t.Fatalf("want an error saying what to do, got %v", err)
	}
	os.Remove(filepath.Join(root, "/etc/oomguard/record.json"))
	if err := syscall.Mkfifo(filepath.Join(root, "/etc/oomguard/record.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root, "/etc/oomguard/record.json", false, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a FIFO record: want a refusal, got %v", err)
	}
}

// A file that was on the node before install is the node's: written over
// with a backup and restored, or left as it is when it holds what install
// would write; never removed by uninstall.
func TestWriteFileKeepsTheNodesFiles(t *testing.T) {
	for _, tc := range []struct{ name, before string }{{"same content", "ours\n"}, {"other content", "the node's\n"}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "/etc/oomguard/config.toml", tc.before)
			s, _ := open(t, root, false)
			if err := s.WriteFile("/etc/oomguard/config.toml", []byte("ours\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s.Commit()
			if read(t, root, "/etc/oomguard/config.toml") != "ours\n" {
				t.Fatal("not written")
			}
			again, _ := open(t, root, false) // a second install changes nothing
			if err := again.WriteFile("/etc/oomguard/config.toml", []byte("ours\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			again.Commit()
			undo, out := open(t, root, false)
			if err := undo.Undo(); err != nil {
				t.Fatal(err)
			}
			if got := read(t, root, "/etc/oomguard/config.toml"); got != tc.before {
				t.Fatalf("after uninstall %q, want the node's %q:\n%s", got, tc.before, out)
			}
			if _, err := os.Stat(filepath.Join(root, "/etc/oomguard/config.toml"+BackupExt)); err == nil {
				t.Fatal("the backup is left")
			}
		})
	}
}

// A rolled-back Set leaves the node as it found it, directories included:
// those it created (its record's own among them) are removed, those that
// were there before and those someone else put a file in are kept.
func TestRollbackLeavesDirectories(t *testing.T) {
	vals := map[string]string{"vm.x": "1"}
	for _, tc := range []struct {
		name   string
		before map[string]string  // files on the node before
		prior  func(s *Set) error // an earlier run, committed
		run    func(t *testing.T, root string, s *Set) error
		keep   string // a directory someone else's file keeps
	}{
		{name: "nested new directories", run: func(t *testing.T, root string, s *Set) error {
			return s.WriteFile("/etc/a/b/c/x.conf", []byte("ours\n"), 0o644)
		}},
		{name: "a directory that was there", before: map[string]string{"/etc/d/theirs.conf": "theirs\n"}, run: func(t *testing.T, root string, s *Set) error {
			return s.WriteFile("/etc/d/x.conf", []byte("ours\n"), 0o644)
		}},
		{name: "the record's directory", run: func(t *testing.T, root string, s *Set) error {
			return s.SetValue(value("vm.x", vals), "0")
		}},
		{name: "the record's directory, there before", before: map[string]string{"/etc/oomguard/config.toml": "x = 1\n"}, run: func(t *testing.T, root string, s *Set) error {
			return s.SetValue(value("vm.x", vals), "0")
		}},
		{name: "a link in new directories", run: func(t *testing.T, root string, s *Set) error {
			return s.Symlink("/opt/oomguard/bin/hook", "/usr/bin/true")
		}},
		{name: "a modified file", before: map[string]string{"/etc/main.conf": "original\n"}, run: func(t *testing.T, root string, s *Set) error {
			return s.Modify("/etc/main.conf", []byte("changed\n"), ".bak", "edited")
		}},
		{name: "after a committed run", prior: func(s *Set) error { return s.WriteFile("/etc/a/x.conf", []byte("ours\n"), 0o644) },
			run: func(t *testing.T, root string, s *Set) error {
				return s.WriteFile("/etc/b/c/y.conf", []byte("ours\n"), 0o644)
			}},
		{name: "someone else's file in a new directory", keep: "/etc/a/theirs.conf", run: func(t *testing.T, root string, s *Set) error {
			err := s.WriteFile("/etc/a/b/x.conf", []byte("ours\n"), 0o644)
			write(t, root, "/etc/a/theirs.conf", "theirs\n")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, c := range tc.before {
				write(t, root, p, c)
			}
			if tc.prior != nil {
				s, _ := open(t, root, false)
				if err := tc.prior(s); err != nil {
					t.Fatal(err)
				}
				if err := s.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			before := files(t, root)
			s, out := open(t, root, false)
			if err := tc.run(t, root, s); err != nil {
				t.Fatal(err)
			}
			if !s.Changed() {
				t.Fatalf("the run changed nothing:\n%s", out)
			}
			if err := s.Rollback(); err != nil {
				t.Fatalf("rollback: %v\n%s", err, out)
			}
			after := files(t, root)
			if tc.keep != "" {
				if !strings.HasSuffix(after[tc.keep], " theirs\n") {
					t.Fatalf("rollback removed someone else's %s:\n%s", tc.keep, out)
				}
				for p := tc.keep; p != "/"; p = filepath.Dir(p) {
					before[p] = after[p]
				}
			}
			if !maps.Equal(after, before) {
				t.Fatalf("rolled back, the node is not as it was:\nbefore %v\nafter  %v\n%s", before, after, out)
			}
		})
	}
}
