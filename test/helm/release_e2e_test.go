//go:build e2e

package helm

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx/v2/v2_3"
	"github.com/spdx/tools-golang/spdxlib"
)

// The release's SBOM as the SPDX project's own Go library reads it: an SPDX
// 2.3 document with no field its model lacks, valid by spdxlib (every
// relationship between elements it holds), describing the image, which
// contains each program of each platform, each depending on the Go modules
// its build information lists.
func TestE2EReleaseSBOM(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/mkrelease", "--bin", "build/image-bin", "--chart", "deploy/helm/oomguard", "--out", out,
		"--release", "v0.9.1", "--commit", "abc", "--created", "1700000000")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkrelease (make image builds build/image-bin): %v\n%s", err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "oomguard-v0.9.1.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var strict v2_3.Document
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&strict); err != nil {
		t.Fatalf("not SPDX 2.3 as tools-golang models it: %v", err)
	}
	doc, err := spdxjson.Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := spdxlib.ValidateDocument(doc); err != nil {
		t.Fatalf("spdxlib: %v", err)
	}
	described, err := spdxlib.GetDescribedPackageIDs(doc)
	if err != nil || len(described) != 1 || described[0] != "image" {
		t.Fatalf("describes %v (%v), want the image", described, err)
	}
	contains, depends := map[string]bool{}, map[string]int{}
	for _, r := range doc.Relationships {
		switch r.Relationship {
		case "CONTAINS":
			contains[string(r.RefB.ElementRefID)] = true
		case "DEPENDS_ON":
			depends[string(r.RefA.ElementRefID)]++
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		for _, p := range []string{"oomguard-nri", "oomguard-doctor", "oomguard-hook", "imagepatch"} {
			id := arch + "-" + p
			if !contains[id] || depends[id] < 3 {
				t.Errorf("%s: contained %v, depends on %d modules", id, contains[id], depends[id])
			}
		}
	}
	for _, p := range doc.Packages {
		if string(p.PackageSPDXIdentifier) != "image" && !strings.Contains(string(p.PackageSPDXIdentifier), "-") {
			t.Errorf("package %s: an identifier of no kind", p.PackageSPDXIdentifier)
		}
	}
}
