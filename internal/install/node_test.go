package install

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A file a case adds to its node's shape: content, mode, or a link.
type nodeFile struct {
	content string
	mode    os.FileMode // 0o644 when 0
	link    string      // a symlink's target instead of content
}

// newNode is a node's root: the shape testdata/nodes/SHAPE as a runtime
// ships or a distribution writes it ("" for none), then files.
func newNode(t *testing.T, shape string, files map[string]nodeFile) string {
	t.Helper()
	root := t.TempDir()
	if shape != "" {
		src := filepath.Join("testdata", "nodes", shape)
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			dst := filepath.Join(root, strings.TrimPrefix(p, src))
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				l, err := os.Readlink(p)
				if err != nil {
					return err
				}
				return os.Symlink(l, dst)
			case d.IsDir():
				return os.MkdirAll(dst, 0o755)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		})
		if err != nil {
			t.Fatalf("shape %s: %v", shape, err)
		}
	}
	for p, f := range files {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if f.link != "" {
			os.Remove(full)
			if err := os.Symlink(f.link, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := f.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(full, []byte(f.content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(full, mode)
		os.Chown(full, 0, 4242) // a group of the node's own, to keep
	}
	return root
}

// shapeFile is one file of a shape, as in testdata.
func shapeFile(t *testing.T, shape, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "nodes", shape, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pluginBinary is a stand-in for the plugin's binary that install copies.
func pluginBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "oomguard-nri")
	if err := os.WriteFile(p, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// options are install's as its command line gives them by default.
func options(root string) NRIOptions {
	return NRIOptions{Root: root, Runtime: "auto", ConfigPath: "/etc/oomguard/config.toml"}
}

// runNRI installs, and returns what install said and its error.
func runNRI(o NRIOptions) (string, error) {
	var out bytes.Buffer
	err := NRI(o, &out)
	return out.String(), err
}

// runUninstall uninstalls, and returns what it said and its error.
func runUninstall(root string, dryRun bool, restart func(root, unit string) (string, error)) (string, error) {
	var out bytes.Buffer
	err := UninstallNRI(root, dryRun, restart, &out)
	return out.String(), err
}

// snapshot is every file, link, directory and mode below root, with each
// file's owner and digest.
func snapshot(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		for _, s := range skip {
			if strings.HasPrefix(p, filepath.Join(root, s)) {
				return nil
			}
		}
		st, _ := os.Lstat(p)
		rel := strings.TrimPrefix(p, root)
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			m[rel] = "-> " + t
		case st.IsDir():
			m[rel] = "dir " + st.Mode().String()
		case !st.Mode().IsRegular():
			m[rel] = st.Mode().String()
		default:
			b, _ := os.ReadFile(p)
			sys := st.Sys().(*syscall.Stat_t)
			m[rel] = fmt.Sprintf("%s %d:%d %x", st.Mode(), sys.Uid, sys.Gid, sha256.Sum256(b))
		}
		return nil
	})
	return m
}

// shippedConfig is deploy/config.toml.
func shippedConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
