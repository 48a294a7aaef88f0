// Package console keeps the OOM killer's output off a slow serial console:
// it sets vm.oom_dump_tasks and the console log level at once and in a
// sysctl.d drop-in, so that they survive reboots, records what they were,
// and undoes exactly that.
package remediate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/oomguard/oomguard/internal/atomicfile"
	"github.com/oomguard/oomguard/internal/safeio"
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

// record is what Apply found before it changed a sysctl, and what it wrote.
type record struct {
	Before map[string]string `json:"before"`
	Set    map[string]string `json:"set"`
}

// Apply makes the node's sysctls what fixes asks for ("oom_dump_tasks",
// "printk"): written now and in DropIn; a fix no longer asked for is undone.
func Apply(root string, fixes []string, dryRun bool, out io.Writer) error {
	if len(fixes) == 0 {
		return Undo(root, dryRun, out)
	}
	rec, err := readRecord(root)
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, f := range fixes {
		switch f {
		case "oom_dump_tasks":
			want["vm.oom_dump_tasks"] = "0"
		case "printk":
			cur, err := readSysctl(root, "kernel.printk")
			if err != nil {
				return err
			}
			fields := strings.Fields(cur)
			if len(fields) != 4 {
				return fmt.Errorf("kernel.printk is %q: want four levels", cur)
			}
			if before, ok := rec.Before["kernel.printk"]; ok { // keep the other three as they were
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
	for key := range rec.Set { // asked for before, not now
		if _, ok := want[key]; !ok {
			if err := restore(root, key, rec, dryRun, out); err != nil {
				return err
			}
		}
	}
	keys := slices.Sorted(maps.Keys(want))
	var dropIn strings.Builder
	dropIn.WriteString("# Written by oomguard-doctor remediate: keeps OOM kills from holding a slow serial console.\n")
	for _, key := range keys {
		cur, err := readSysctl(root, key)
		if err != nil {
			return err
		}
		if _, ok := rec.Before[key]; !ok {
			rec.Before[key] = cur
		}
		rec.Set[key] = want[key]
		fmt.Fprintf(&dropIn, "%s = %s\n", key, want[key])
		if normal(cur) == normal(want[key]) {
			fmt.Fprintf(out, "unchanged %s = %s\n", key, cur)
			continue
		}
		if dryRun {
			fmt.Fprintf(out, "would: set %s = %s (now %s)\n", key, want[key], cur)
			continue
		}
		if err := writeSysctl(root, key, want[key]); err != nil {
			return err
		}
		fmt.Fprintf(out, "set %s = %s (was %s)\n", key, want[key], cur)
	}
	if err := writeFile(root, DropIn, dropIn.String(), dryRun, out); err != nil {
		return err
	}
	if dryRun {
		return nil
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	return atomicfile.Write(filepath.Join(root, Record), append(b, '\n'), 0o644)
}

// Undo restores every sysctl Apply changed, unless someone changed it
// since, and removes the drop-in and the record.
func Undo(root string, dryRun bool, out io.Writer) error {
	rec, err := readRecord(root)
	if err != nil {
		return err
	}
	if len(rec.Set) == 0 {
		fmt.Fprintln(out, "no console fix to undo")
		return nil
	}
	for key := range rec.Set {
		if err := restore(root, key, rec, dryRun, out); err != nil {
			return err
		}
	}
	for _, p := range []string{DropIn, Record} {
		if dryRun {
			fmt.Fprintf(out, "would: remove %s\n", p)
			continue
		}
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		fmt.Fprintf(out, "removed %s\n", p)
	}
	return nil
}

func restore(root, key string, rec record, dryRun bool, out io.Writer) error {
	cur, err := readSysctl(root, key)
	if err != nil {
		return err
	}
	before := rec.Before[key]
	switch {
	case normal(cur) != normal(rec.Set[key]):
		fmt.Fprintf(out, "left %s = %s alone: it changed since (oomguard set %s, it was %s)\n", key, cur, rec.Set[key], before)
	case dryRun:
		fmt.Fprintf(out, "would: restore %s = %s\n", key, before)
	default:
		if err := writeSysctl(root, key, before); err != nil {
			return err
		}
		fmt.Fprintf(out, "restored %s = %s\n", key, before)
	}
	delete(rec.Set, key)
	delete(rec.Before, key)
	return nil
}

func readRecord(root string) (record, error) {
	rec := record{Before: map[string]string{}, Set: map[string]string{}}
	b, err := safeio.ReadFile(filepath.Join(root, Record), 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s is not valid JSON (%v): restore the sysctls it names by hand and remove it", Record, err)
	}
	if rec.Before == nil {
		rec.Before = map[string]string{}
	}
	if rec.Set == nil {
		rec.Set = map[string]string{}
	}
	return rec, nil
}

func sysctlPath(root, key string) string {
	return filepath.Join(root, "proc/sys", strings.ReplaceAll(key, ".", "/"))
}

func readSysctl(root, key string) (string, error) {
	b, err := safeio.ReadFile(sysctlPath(root, key), 4096)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeSysctl(root, key, value string) error {
	if err := os.WriteFile(sysctlPath(root, key), []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("set %s = %s (the node's /proc must be writable: a privileged container): %w", key, value, err)
	}
	return nil
}

// normal compares sysctl values as the kernel prints them: fields by tabs.
func normal(v string) string { return strings.Join(strings.Fields(v), " ") }

func writeFile(root, p, content string, dryRun bool, out io.Writer) error {
	if old, err := os.ReadFile(filepath.Join(root, p)); err == nil && string(old) == content {
		fmt.Fprintf(out, "unchanged %s\n", p)
		return nil
	}
	if dryRun {
		fmt.Fprintf(out, "would: write %s\n", p)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(root, p), []byte(content), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s\n", p)
	return nil
}
