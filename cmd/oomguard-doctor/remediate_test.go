package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// remediate on a node tree: the sysctls at once and in a drop-in, a second
// run changes nothing, a narrower configuration undoes what it no longer
// asks for, and --undo restores the node unless someone changed it since.
func TestRemediate(t *testing.T) {
	root := t.TempDir()
	for p, c := range map[string]string{"proc/sys/vm/oom_dump_tasks": "1\n", "proc/sys/kernel/printk": "7\t4\t1\t7\n"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	cfg := func(body string) string {
		p := filepath.Join(t.TempDir(), "c.toml")
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	both, dumpOnly := cfg("[doctor]\nconsole_fix = [\"oom_dump_tasks\", \"printk\"]\n"), cfg("[doctor]\nconsole_fix = [\"oom_dump_tasks\"]\n")
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(root, p)); return string(b) }
	do := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"remediate", "--root", root}, args...), &out, &errb); code != 0 {
			t.Fatalf("remediate %v: %d %s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	if out := do("--config", both, "--dry-run"); !strings.Contains(out, "would: set vm.oom_dump_tasks = 0") || read("proc/sys/vm/oom_dump_tasks") != "1\n" {
		t.Fatalf("dry run: %s", out)
	}
	do("--config", both)
	if read("proc/sys/vm/oom_dump_tasks") != "0\n" || read("proc/sys/kernel/printk") != "4 4 1 7\n" {
		t.Fatalf("sysctls: %q %q", read("proc/sys/vm/oom_dump_tasks"), read("proc/sys/kernel/printk"))
	}
	if d := read("etc/sysctl.d/90-oomguard-console.conf"); !strings.Contains(d, "kernel.printk = 4 4 1 7\nvm.oom_dump_tasks = 0\n") {
		t.Fatalf("drop-in: %q", d)
	}
	if out := do("--config", both); strings.Contains("\n"+out, "\nset ") || strings.Contains(out, "wrote") {
		t.Fatalf("second run: %s", out)
	}
	do("--config", dumpOnly)
	if strings.Join(strings.Fields(read("proc/sys/kernel/printk")), " ") != "7 4 1 7" || read("proc/sys/vm/oom_dump_tasks") != "0\n" ||
		strings.Contains(read("etc/sysctl.d/90-oomguard-console.conf"), "printk") {
		t.Fatalf("narrowed: printk %q dump %q", read("proc/sys/kernel/printk"), read("proc/sys/vm/oom_dump_tasks"))
	}
	os.WriteFile(filepath.Join(root, "proc/sys/vm/oom_dump_tasks"), []byte("2\n"), 0o644) // the operator's own change
	if out := do("--undo"); !strings.Contains(out, "left vm.oom_dump_tasks = 2 alone") {
		t.Fatalf("undo: %s", out)
	}
	for _, p := range []string{"etc/sysctl.d/90-oomguard-console.conf", "etc/oomguard/console-fix.json"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("undo left %s", p)
		}
	}
	if out := do("--config", cfg("")); !strings.Contains(out, "no console fix to undo") {
		t.Fatalf("no fix configured: %s", out)
	}
	var errb bytes.Buffer
	if code := run([]string{"remediate", "--root", root, "--config", cfg("[doctor]\nconsole_fix = [\"reboot\"]\n")}, &bytes.Buffer{}, &errb); code != 4 || !strings.Contains(errb.String(), "console_fix") {
		t.Fatalf("a bad fix: %d %s", code, errb.String())
	}
}

// remediate is a transaction: when the drop-in cannot be written (an odd
// /etc), the sysctls it set are put back and no record is left, so that a
// later run records the node's real originals; --undo leaves a drop-in the
// operator edited; a FIFO where it reads fails at once.
func TestRemediateTransaction(t *testing.T) {
	root := t.TempDir()
	for p, c := range map[string]string{"proc/sys/vm/oom_dump_tasks": "1\n", "proc/sys/kernel/printk": "7\t4\t1\t7\n"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	cfg := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(cfg, []byte("[doctor]\nconsole_fix = [\"oom_dump_tasks\", \"printk\"]\n"), 0o644)
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(root, p)); return string(b) }
	remediate := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := run(append([]string{"remediate", "--root", root, "--config", cfg}, args...), &out, &out)
		return code, out.String()
	}

	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/sysctl.d"), []byte("not a directory"), 0o644)
	if code, out := remediate(); code == 0 || !strings.Contains(out, "rolled back") {
		t.Fatalf("an unwritable drop-in: exit %d\n%s", code, out)
	}
	if read("proc/sys/vm/oom_dump_tasks") != "1\n" || read("proc/sys/kernel/printk") != "7\t4\t1\t7\n" {
		t.Fatalf("the sysctls were left changed: %q %q", read("proc/sys/vm/oom_dump_tasks"), read("proc/sys/kernel/printk"))
	}
	if _, err := os.Stat(filepath.Join(root, "etc/oomguard/console-fix.json")); err == nil {
		t.Fatal("a record was left of a change that was rolled back")
	}
	os.Remove(filepath.Join(root, "etc/sysctl.d"))
	if code, out := remediate(); code != 0 || !strings.Contains(out, "set vm.oom_dump_tasks = 0 (was 1)") {
		t.Fatalf("the re-run must find the node's originals: exit %d\n%s", code, out)
	}
	os.WriteFile(filepath.Join(root, "etc/sysctl.d/90-oomguard-console.conf"), []byte("vm.oom_dump_tasks = 0 # mine now\n"), 0o644)
	if code, out := remediate("--undo"); code != 0 || !strings.Contains(out, "left /etc/sysctl.d/90-oomguard-console.conf alone") ||
		read("proc/sys/vm/oom_dump_tasks") != "1\n" || read("etc/sysctl.d/90-oomguard-console.conf") != "vm.oom_dump_tasks = 0 # mine now\n" {
		t.Fatalf("undo with an edited drop-in: exit %d\n%s", code, out)
	}

	os.Remove(filepath.Join(root, "etc/sysctl.d/90-oomguard-console.conf"))
	if err := syscall.Mkfifo(filepath.Join(root, "etc/oomguard/console-fix.json"), 0o644); err != nil {
		os.MkdirAll(filepath.Join(root, "etc/oomguard"), 0o755)
		if err := syscall.Mkfifo(filepath.Join(root, "etc/oomguard/console-fix.json"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan string, 1)
	go func() { _, out := remediate(); done <- out }()
	select {
	case out := <-done:
		if !strings.Contains(out, "not a regular file") {
			t.Fatalf("a FIFO for a record: %s", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("remediate waits on a FIFO")
	}
}

// remediate writes nothing outside --root, whatever links the tree holds:
// a sysctl or a directory above it linked out (absolutely or relatively) is
// refused, saying so; a linked /etc or record directory is followed only
// below the root; the files outside are as they were.
func TestRemediateStaysBelowRoot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		links map[string]string // a path below root → its link's target; "O" is the outside directory
		want  string            // what the refusal says
	}{
		{"a sysctl linked out", map[string]string{"proc/sys/vm/oom_dump_tasks": "O/proc/sys/vm/oom_dump_tasks"}, "/proc/sys/vm/oom_dump_tasks is a link"},
		{"a sysctl linked out relatively", map[string]string{"proc/sys/vm/oom_dump_tasks": "../../../../o/proc/sys/vm/oom_dump_tasks"}, "/proc/sys/vm/oom_dump_tasks is a link"},
		{"a sysctl directory linked out", map[string]string{"proc/sys/vm": "O/proc/sys/vm"}, "/proc/sys/vm is a link"},
		{"/proc linked out", map[string]string{"proc": "../o/proc"}, "/proc is a link"},
		{"sysctl.d linked out", map[string]string{"etc/sysctl.d": "O/etc/sysctl.d"}, "is reached through a link"},
		{"sysctl.d linked out relatively", map[string]string{"etc/sysctl.d": "../../o/etc/sysctl.d"}, "is reached through a link"},
		{"the record's directory linked out", map[string]string{"etc/oomguard": "O/etc/oomguard"}, "is reached through a link"},
		{"/etc linked out relatively", map[string]string{"etc": "../o/etc"}, "is reached through a link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, outside := filepath.Join(base, "r"), filepath.Join(base, "o")
			node := map[string]string{"proc/sys/vm/oom_dump_tasks": "1\n", "proc/sys/kernel/printk": "7\t4\t1\t7\n",
				"etc/sysctl.d/10-node.conf": "kernel.panic = 10\n", "etc/oomguard/keep": "the operator's\n"}
			for _, dir := range []string{root, outside} {
				for p, c := range node {
					os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
					os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644)
				}
			}
			for p, target := range tc.links {
				os.RemoveAll(filepath.Join(root, p))
				if err := os.Symlink(strings.Replace(target, "O", outside, 1), filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
			before := tree(t, outside)
			cfg := filepath.Join(t.TempDir(), "c.toml")
			os.WriteFile(cfg, []byte("[doctor]\nconsole_fix = [\"oom_dump_tasks\", \"printk\"]\n"), 0o644)
			var out, errb bytes.Buffer
			code := run([]string{"remediate", "--root", root, "--config", cfg}, &out, &errb)
			if after := tree(t, outside); !maps.Equal(after, before) {
				t.Fatalf("remediate wrote outside its root (exit %d):\nbefore %v\nafter  %v\n%s%s", code, before, after, out.String(), errb.String())
			}
			if code == 0 || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, want a refusal saying %q:\n%s%s", code, tc.want, out.String(), errb.String())
			}
			var undo bytes.Buffer
			run([]string{"remediate", "--root", root, "--undo"}, &undo, &undo)
			if after := tree(t, outside); !maps.Equal(after, before) {
				t.Fatalf("--undo changed what is outside its root:\nbefore %v\nafter  %v\n%s", before, after, undo.String())
			}
		})
	}
}

// tree is every file and link below dir, with its content or target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "-> " + l
		case d.IsDir():
			m[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			m[rel] = string(b)
		}
		return nil
	})
	return m
}
