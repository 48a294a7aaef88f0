// Package atomicfile replaces files in one rename, so a runtime reading a
// configuration never sees half of it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Write replaces path in one rename so a runtime never reads half a file.
func Write(path string, data []byte, mode os.FileMode) error {
	return write(path, data, mode, -1, -1)
}

// WriteLike is Write with the mode and owner of like (the file being
// replaced), so that a file holding secrets is never left more readable.
func WriteLike(path string, data []byte, like os.FileInfo) error {
	uid, gid := -1, -1
	if st, ok := like.Sys().(*syscall.Stat_t); ok {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	return write(path, data, like.Mode().Perm(), uid, gid)
}

func write(path string, data []byte, mode os.FileMode, uid, gid int) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	// Mode and owner before the content: a secret is never readable by more.
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if uid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return fmt.Errorf("chown %s: %w", tmp.Name(), err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("install %s: %w", path, err)
	}
	return nil
}
