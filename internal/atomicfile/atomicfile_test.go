package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b.json")
	for _, content := range []string{"one", "two"} {
		if err := Write(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		st, _ := os.Stat(p)
		if string(b) != content || st.Mode().Perm() != 0o600 {
			t.Fatalf("got %q mode %v", b, st.Mode())
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
	if err := Write("/proc/x/y", []byte("z"), 0o644); err == nil {
		t.Fatal("want an error")
	}
}

// WriteIn changes only what its directory holds: a link at the name is
// replaced, never written through; the mode is kept; no temporary is left.
func TestWriteIn(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "d"), filepath.Join(base, "outside")
	os.Mkdir(dir, 0o755)
	os.WriteFile(outside, []byte("theirs"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "linked"))
	os.WriteFile(filepath.Join(dir, "secret"), []byte("old"), 0o600)
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		name string
		like string // a file whose mode to keep
		mode os.FileMode
	}{{"new", "", 0o644}, {"linked", "", 0o644}, {"secret", "secret", 0o600}} {
		var err error
		if tc.like != "" {
			st, _ := os.Stat(filepath.Join(dir, tc.like))
			err = WriteLikeIn(d, tc.name, []byte("ours"), st)
		} else {
			err = WriteIn(d, tc.name, []byte("ours"), tc.mode)
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		st, err := os.Lstat(filepath.Join(dir, tc.name))
		if b, _ := os.ReadFile(filepath.Join(dir, tc.name)); err != nil || string(b) != "ours" || st.Mode() != tc.mode {
			t.Fatalf("%s: %q, mode %v (%v)", tc.name, b, st.Mode(), err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "theirs" {
		t.Fatalf("written through a link: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("temporary files left: %v", ents)
	}
	for _, name := range []string{"", ".", "..", "a/b"} {
		if err := WriteIn(d, name, nil, 0o644); err == nil {
			t.Errorf("name %q: want an error", name)
		}
	}
}
