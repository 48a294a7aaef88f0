package imagepatch

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A spec parses or fails with an error; one that parses makes the same
// layer every time.
func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(ShimSpecTOML()))
	f.Add([]byte("name='motd'\nversion='2'\n[[file]]\npath='/etc/motd'\nsource='x'\n[config]\nenv={A='1',B='2'}"))
	f.Add([]byte("name='a'\nversion='1'\n[[file]]\npath='/a'\ncontent='y'\n[[file]]\npath='/a/b'\ncontent='z'"))
	dir := f.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data, dir)
		if err != nil {
			return
		}
		for _, arch := range append(s.Architectures(), "") {
			a, err1 := s.layerTar(arch)
			b, err2 := s.layerTar(arch)
			if (err1 == nil) != (err2 == nil) || !bytes.Equal(a, b) {
				t.Fatalf("layer for %q differs between two builds", arch)
			}
		}
	})
}
