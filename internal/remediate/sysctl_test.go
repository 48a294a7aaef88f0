package remediate

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A sysctl is read and written only where the node's /proc/sys has it: no
// link is followed in any part of its path (absolute, relative, within the
// root or out of it), nothing but a regular file is opened, and the file
// outside the root is never written.
func TestSysctlFollowsNoLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(root, outside string) error
		want string // what the refusal says; "" for none
	}{
		{"a file", func(root, outside string) error { return nil }, ""},
		{"the root a link", nil, ""},
		{"the sysctl linked out", func(root, outside string) error {
			return relink(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"), filepath.Join(outside, "oom_dump_tasks"))
		}, "/proc/sys/vm/oom_dump_tasks is a link to " + "OUT/oom_dump_tasks"},
		{"the sysctl linked relatively out", func(root, outside string) error {
			return relink(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"), "../../../../o/oom_dump_tasks")
		}, "/proc/sys/vm/oom_dump_tasks is a link to ../../../../o/oom_dump_tasks"},
		{"the sysctl linked within the root", func(root, outside string) error {
			os.WriteFile(filepath.Join(root, "proc/sys/vm/real"), []byte("1\n"), 0o644)
			return relink(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"), "real")
		}, "/proc/sys/vm/oom_dump_tasks is a link to real"},
		{"/proc/sys linked out", func(root, outside string) error {
			os.MkdirAll(filepath.Join(outside, "sys/vm"), 0o755)
			os.WriteFile(filepath.Join(outside, "sys/vm/oom_dump_tasks"), []byte("1\n"), 0o644)
			return relink(filepath.Join(root, "proc/sys"), filepath.Join(outside, "sys"))
		}, "/proc/sys is a link to "},
		{"a FIFO", func(root, outside string) error {
			os.Remove(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"))
			return syscall.Mkfifo(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"), 0o644)
		}, "not a regular file"},
		{"a directory", func(root, outside string) error {
			os.Remove(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"))
			return os.Mkdir(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"), 0o755)
		}, "not a regular file"},
		{"missing", func(root, outside string) error { return os.Remove(filepath.Join(root, "proc/sys/vm/oom_dump_tasks")) }, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, outside := filepath.Join(base, "r"), filepath.Join(base, "o")
			os.MkdirAll(filepath.Join(root, "proc/sys/vm"), 0o755)
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"), []byte("1\n"), 0o644)
			os.WriteFile(filepath.Join(outside, "oom_dump_tasks"), []byte("1\n"), 0o644)
			given := root
			if tc.prep == nil { // the root itself is the user's to give, through a link or not
				given = filepath.Join(base, "link")
				os.Symlink("r", given)
			} else if err := tc.prep(root, outside); err != nil {
				t.Fatal(err)
			}
			want := strings.ReplaceAll(tc.want, "OUT", outside)
			v, rerr := readSysctl(given, "vm.oom_dump_tasks")
			werr := writeSysctl(given, "vm.oom_dump_tasks", "0")
			for _, err := range []error{rerr, werr} {
				if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
					t.Errorf("got %v, want %q", err, want)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "oom_dump_tasks")); string(b) != "1\n" {
				t.Fatalf("the file outside the root was written: %q", b)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "sys/vm/oom_dump_tasks")); len(b) > 0 && string(b) != "1\n" {
				t.Fatalf("the file outside the root was written: %q", b)
			}
			if want == "" {
				if b, _ := os.ReadFile(filepath.Join(root, "proc/sys/vm/oom_dump_tasks")); v != "1" || string(b) != "0\n" {
					t.Fatalf("read %q, then wrote %q", v, b)
				}
			}
		})
	}
	for _, key := range []string{"vm..x", "../etc/passwd", "", "vm/", "/vm/x"} {
		if _, err := readSysctl(t.TempDir(), key); err == nil || !strings.Contains(err.Error(), "is not the name of a sysctl") {
			t.Errorf("sysctl %q: %v", key, err)
		}
	}
}

func relink(p, target string) error {
	os.RemoveAll(p)
	return os.Symlink(target, p)
}
