// Package remediate is the doctor's remediation: it keeps the OOM killer's
// output off a slow serial console by setting vm.oom_dump_tasks and the
// console log level at once and in a sysctl.d drop-in, so that they survive
// reboots, through package changes, which records what they were and undoes
// exactly that.
package remediate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/oomguard/oomguard/internal/changes"
)

// Paths on the node.
const (
	DropIn = "/etc/sysctl.d/90-oomguard-console.conf"
	Record = "/etc/oomguard/console-fix.json"
)

// QuietLevel is the console log level of the "printk" fix: the OOM killer's
// "Killed process" line (KERN_ERR) still reaches the console; its header,
// stack, memory report and task dump (KERN_WARNING and below) do not.
const QuietLevel = "4"

const dropInHeader = "# Written by oomguard-doctor remediate: keeps OOM kills from holding a slow serial console.\n"

// sysctl is a sysctl of the node under root, as package changes sets it.
func sysctl(root, key string) changes.Value {
	return changes.Value{
		Key: key,
		Get: func() (string, error) { return readSysctl(root, key) },
		Put: func(v string) error {
			err := writeSysctl(root, key, v)
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
				return fmt.Errorf("%w (the node's /proc must be writable: a privileged container)", err)
			}
			return err
		},
		Same: func(a, b string) bool { return normal(a) == normal(b) },
	}
}

// normal compares sysctl values as the kernel prints them: fields by tabs.
func normal(v string) string { return strings.Join(strings.Fields(v), " ") }

// Apply makes the node's sysctls what fixes asks for ("oom_dump_tasks",
// "printk"): written now and in DropIn; a fix no longer asked for is undone.
func Apply(root string, fixes []string, dryRun bool, out io.Writer) (err error) {
	if len(fixes) == 0 {
		return Undo(root, dryRun, out)
	}
	s, err := changes.Open(root, Record, dryRun, out)
	if err != nil {
		return err
	}
	// Each change is recorded before it is made; a step that fails (the
	// drop-in cannot be written) undoes the ones before it.
	defer func() {
		if rerr := s.Rollback(); err == nil {
			err = rerr
		}
	}()
	want := map[string]string{}
	for _, f := range fixes {
		switch f {
		case "oom_dump_tasks":
			want["vm.oom_dump_tasks"] = "0"
		case "printk":
			cur, err := readSysctl(root, "kernel.printk")
			if err != nil {
				return fmt.Errorf("read kernel.printk: %w", err)
			}
			fields := strings.Fields(cur)
			if len(fields) != 4 {
				return fmt.Errorf("kernel.printk is %q: want four levels", cur)
			}
			if before, ok := s.Before("kernel.printk"); ok { // keep the other three as they were
				if bf := strings.Fields(before); len(bf) == 4 {
					fields = bf
				}
			}
			fields[0] = QuietLevel
			want["kernel.printk"] = strings.Join(fields, " ")
		default:
			return fmt.Errorf("console fix %q: want any of oom_dump_tasks, printk", f)
		}
	}
	for _, key := range s.Keys() { // asked for before, not now
		if _, ok := want[key]; !ok {
			if err := s.RestoreValue(sysctl(root, key)); err != nil {
				return err
			}
		}
	}
	var dropIn strings.Builder
	dropIn.WriteString(dropInHeader)
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if err := s.SetValue(sysctl(root, key), want[key]); err != nil {
			return err
		}
		fmt.Fprintf(&dropIn, "%s = %s\n", key, want[key])
	}
	if err := s.WriteFile(DropIn, []byte(dropIn.String()), 0o644); err != nil {
		return err
	}
	return s.Commit()
}

// Undo restores every sysctl Apply changed, unless someone changed it
// since, and removes the drop-in (unless someone edited it) and the record.
func Undo(root string, dryRun bool, out io.Writer) error {
	s, err := changes.Open(root, Record, dryRun, out)
	if err != nil {
		return err
	}
	if len(s.Keys()) == 0 && !s.Owns(DropIn) {
		fmt.Fprintln(out, "no console fix to undo")
		return nil
	}
	for _, key := range s.Keys() {
		if err := s.RestoreValue(sysctl(root, key)); err != nil {
			return err
		}
	}
	if !s.Owns(DropIn) {
		// A record from before drop-ins were recorded: the drop-in is ours if it says so.
		if b, err := s.ReadFile(DropIn, changes.MaxFile); err == nil && strings.HasPrefix(string(b), dropInHeader) {
			s.Adopt(DropIn, b)
		}
	}
	return s.Undo()
}
