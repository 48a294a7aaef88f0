// Package install writes what a node's runtime needs to run oomguard: the
// NRI plugin and NRI switched on for containerd and CRI-O (drop-in files
// only), and the OCI hook's hooks.d file. Every change is recorded in a
// manifest so that uninstall undoes exactly that, and every run says what it
// changed, would change (dry run), or found unchanged.
package install

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/oomguard/oomguard/internal/atomicfile"
)

// manifest records what install did, so uninstall undoes exactly that.
type manifest struct {
	Files   []string          `json:"files"`             // created or owned by oomguard
	Sums    map[string]string `json:"sums,omitempty"`    // owned file → sha256 of what install wrote, or "-> target" for a link
	Backups map[string]string `json:"backups,omitempty"` // modified file → its backup
	Written map[string]string `json:"written,omitempty"` // modified file → the content install left
}

// files writes below a node's root and reports each change.
type files struct {
	root   string
	dryRun bool
	out    io.Writer
	man    manifest
	// manifestPath is where the manifest lives, as a path on the node.
	manifestPath string
	changed      bool // something on the node was (or, dry, would be) written
}

func (w *files) host(p string) string { return filepath.Join(w.root, p) }

// writeFile writes an oomguard-owned file, reporting unchanged when it is.
func (w *files) writeFile(p string, data []byte, mode os.FileMode) error {
	w.own(p, sum(data))
	return w.writeRaw(p, data, mode, "wrote")
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func (w *files) writeRaw(p string, data []byte, mode os.FileMode, verb string) error {
	if old, err := os.ReadFile(w.host(p)); err == nil && bytes.Equal(old, data) {
		fmt.Fprintf(w.out, "unchanged %s\n", p)
		return nil
	}
	if w.dryRun {
		w.changed = true
		fmt.Fprintf(w.out, "would: %s %s\n", verb, p)
		return nil
	}
	if err := atomicfile.Write(w.host(p), data, mode); err != nil {
		return err
	}
	w.changed = true
	fmt.Fprintf(w.out, "%s %s\n", verb, p)
	return nil
}

func (w *files) symlink(p, target string) error {
	w.own(p, "-> "+target)
	if t, err := os.Readlink(w.host(p)); err == nil && t == target {
		fmt.Fprintf(w.out, "unchanged %s -> %s\n", p, target)
		return nil
	}
	if w.dryRun {
		w.changed = true
		fmt.Fprintf(w.out, "would: link %s -> %s\n", p, target)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(w.host(p)), 0o755); err != nil {
		return err
	}
	os.Remove(w.host(p))
	if err := os.Symlink(target, w.host(p)); err != nil {
		return err
	}
	w.changed = true
	fmt.Fprintf(w.out, "linked %s -> %s\n", p, target)
	return nil
}

func (w *files) own(p, sum string) {
	if !slices.Contains(w.man.Files, p) {
		w.man.Files = append(w.man.Files, p)
	}
	if w.man.Sums == nil {
		w.man.Sums = map[string]string{}
	}
	w.man.Sums[p] = sum
}

// same reports whether p still holds what install left there (its sum).
func (w *files) same(p, want string) bool {
	if target, ok := strings.CutPrefix(want, "-> "); ok {
		t, err := os.Readlink(w.host(p))
		return err == nil && t == target
	}
	b, err := os.ReadFile(w.host(p))
	return err == nil && sum(b) == want
}

func (w *files) readManifest() {
	w.man = manifest{}
	if b, err := os.ReadFile(w.host(w.manifestPath)); err == nil {
		json.Unmarshal(b, &w.man)
	}
}

func (w *files) saveManifest() error {
	b, err := json.MarshalIndent(w.man, "", "  ")
	if err != nil {
		return err
	}
	if w.dryRun {
		return nil
	}
	return atomicfile.Write(w.host(w.manifestPath), append(b, '\n'), 0o644)
}

// uninstall removes what the manifest says install created and restores
// what it modified, unless someone changed that file since.
func (w *files) uninstall() error {
	b, err := os.ReadFile(w.host(w.manifestPath))
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(w.out, "nothing to uninstall: "+w.manifestPath+" does not exist")
		return nil
	}
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s is not valid JSON (%v): remove the files it lists by hand", w.manifestPath, err)
	}
	var errs []error
	for modified, backup := range m.Backups {
		cur, _ := os.ReadFile(w.host(modified))
		if string(cur) != m.Written[modified] {
			fmt.Fprintf(w.out, "left %s alone: it changed since install; its original is %s\n", modified, backup)
			continue
		}
		if w.dryRun {
			w.changed = true
			fmt.Fprintf(w.out, "would: restore %s from %s\n", modified, backup)
			continue
		}
		if err := os.Rename(w.host(backup), w.host(modified)); err != nil {
			errs = append(errs, err)
			continue
		}
		w.changed = true
		fmt.Fprintf(w.out, "restored %s\n", modified)
	}
	for _, f := range append(m.Files, w.manifestPath) {
		if _, err := os.Lstat(w.host(f)); err != nil {
			continue
		}
		if want, ok := m.Sums[f]; ok && !w.same(f, want) {
			fmt.Fprintf(w.out, "left %s alone: it changed since install\n", f)
			continue
		}
		if w.dryRun {
			w.changed = w.changed || f != w.manifestPath
			fmt.Fprintf(w.out, "would: remove %s\n", f)
			continue
		}
		if err := os.Remove(w.host(f)); err != nil {
			errs = append(errs, err)
			continue
		}
		w.changed = w.changed || f != w.manifestPath
		fmt.Fprintf(w.out, "removed %s\n", f)
	}
	return errors.Join(errs...)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
