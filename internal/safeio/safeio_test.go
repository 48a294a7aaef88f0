package safeio

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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

// ReadData refuses what ReadFile refuses, and kernel interfaces too, without
// a read that could block: /proc/kmsg (where it can be opened) waits for the
// kernel's next message, and a 1 GiB file is refused by its size.
func TestReadData(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	os.WriteFile(regular, []byte("hello"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := func(name, to string) string {
		p := filepath.Join(dir, name)
		os.Symlink(to, p)
		return p
	}
	big := filepath.Join(dir, "big")
	f, _ := os.Create(big)
	f.Truncate(1 << 30)
	f.Close()
	kmsg := "/proc/kmsg"
	if f, err := os.Open(kmsg); err == nil {
		f.Close()
	} else {
		kmsg = "/proc/self/status" // another procfs file: refused all the same
	}

	if b, info, err := ReadData(regular, 5); err != nil || string(b) != "hello" || info.Size != 5 || info.Ino == 0 || info.Ctime == 0 {
		t.Fatalf("regular: %q %+v %v", b, info, err)
	}
	if b, _, err := ReadData(empty, 5); err != nil || len(b) != 0 {
		t.Fatalf("empty: %q %v", b, err)
	}
	for _, tc := range []struct {
		name, path string
		limit      int64
		want       error
	}{
		{"fifo without a writer", fifo, 1 << 20, ErrNotRegular},
		{"symlink to /dev/zero", link("zero", "/dev/zero"), 1 << 20, ErrNotRegular},
		{"directory", dir, 1 << 20, ErrNotRegular},
		{"1 GiB", big, 1 << 20, ErrTooLarge},
		{"one byte over", regular, 4, ErrTooLarge},
		{"link to " + kmsg, link("kmsg", kmsg), 1 << 20, ErrKernelFS},
		{"a sysfs file", "/sys/kernel/uevent_seqnum", 1 << 20, ErrKernelFS},
		{"a cgroup file", "/sys/fs/cgroup/cgroup.controllers", 1 << 20, ErrKernelFS},
	} {
		if _, err := os.Stat(tc.path); err != nil && !errors.Is(err, ErrNotRegular) && tc.want == ErrKernelFS {
			continue // not on this machine
		}
		done := make(chan error, 1)
		go func() { _, _, err := ReadData(tc.path, tc.limit); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		case <-time.After(20 * time.Second): // a bound on noticing a read that hangs, not a benchmark
			t.Fatalf("%s: the read blocks", tc.name)
		}
	}
}
