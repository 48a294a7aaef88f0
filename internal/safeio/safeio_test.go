package safeio

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	os.WriteFile(regular, []byte("hello"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	os.Symlink("/dev/zero", zero)
	big := filepath.Join(dir, "big")
	f, _ := os.Create(big)
	f.Truncate(100 << 20) // sparse: 100 MB that cost nothing to write
	f.Close()

	if b, err := ReadFile(regular, 5); err != nil || string(b) != "hello" {
		t.Fatalf("regular: %q %v", b, err)
	}
	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"fifo without a writer", fifo, ErrNotRegular},
		{"symlink to /dev/zero", zero, ErrNotRegular},
		{"directory", dir, ErrNotRegular},
		{"100 MB", big, ErrTooLarge},
		{"one byte over", regular, ErrTooLarge},
	} {
		limit := int64(1 << 20)
		if tc.name == "one byte over" {
			limit = 4
		}
		if _, err := ReadFile(tc.path, limit); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestOpenAppend(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// No reader: the open fails at once instead of waiting for one.
	if _, err := OpenAppend(fifo, 0o640); err == nil {
		t.Fatal("a FIFO without a reader was opened")
	}
	// With a reader it opens, and is refused for not being a regular file.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := OpenAppend(fifo, 0o640); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("FIFO with a reader: %v", err)
	}
	f, err := OpenAppend(filepath.Join(dir, "log"), 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("x\n")
	f.Close()
}
