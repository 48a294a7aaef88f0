package release

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/testbin"
)

// The SBOM of an image: every program of every platform with its checksum,
// the modules it links and its Go, each once; the same bytes each time.
func TestSBOM(t *testing.T) {
	exe, err := testbin.Program(t.TempDir(), "imagepatch") // as make image builds it
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, a := range Arches {
		for _, p := range Programs {
			os.MkdirAll(filepath.Join(bin, a), 0o755)
			os.WriteFile(filepath.Join(bin, a, p), b, 0o755)
		}
	}
	m := Meta{Version: "v1.4.0", Commit: "abc", Created: time.Unix(1700000000, 0).UTC()}
	idx, _, err := Build(bin, m)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	doc, err := SBOM(bin, d, m)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	for _, want := range []string{`"spdxVersion": "SPDX-2.3"`, `"documentNamespace": "https://github.com/oomguard/oomguard/spdx/` + d.Hex + `"`,
		`"created": "2023-11-14T22:13:20Z"`, `"SPDXID": "SPDXRef-arm64-imagepatch"`, `"SPDXID": "SPDXRef-gomod-stdlib-`,
		`pkg:golang/github.com/google/go-containerregistry@`, `"relationshipType": "DESCRIBES"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the SBOM lacks %s", want)
		}
	}
	if n := strings.Count(s, `"name": "github.com/google/go-containerregistry"`); n != 1 {
		t.Errorf("go-containerregistry listed %d times, want once", n)
	}
	if again, _ := SBOM(bin, d, m); !bytes.Equal(again, doc) {
		t.Error("made again, other bytes")
	}
	os.WriteFile(filepath.Join(bin, "amd64", "imagepatch"), []byte("not a Go binary"), 0o755)
	if _, err := SBOM(bin, d, m); err == nil || !strings.Contains(err.Error(), "build information") {
		t.Errorf("a binary without build information: %v", err)
	}
}
