package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The chart packaged for a release: helm's layout (NAME/…), every header the
// same but for its path and size, in order; its appVersion the release's,
// its version too when that is a semantic version, its image pinned to the
// release's digest (and repository when pushed elsewhere); the same bytes
// whenever it is packaged.
func TestPackageChart(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "deploy", "helm", "oomguard")
	digest := "sha256:" + strings.Repeat("ab", 32)
	m := Meta{Version: "v1.4.0", Commit: "abc", Created: time.Unix(1700000000, 0).UTC()}
	c, err := PackageChart(dir, m, "registry.example/oomguard", digest)
	if err != nil {
		t.Fatal(err)
	}
	if c.FileName() != "oomguard-1.4.0.tgz" || c.AppVersion != "v1.4.0" {
		t.Fatalf("packaged %s, appVersion %s", c.FileName(), c.AppVersion)
	}
	files := untgz(t, c.Archive)
	values := string(files["oomguard/values.yaml"])
	if !strings.Contains(values, "\n  repository: registry.example/oomguard\n") || !strings.Contains(values, "\n  digest: \""+digest+"\"") ||
		strings.Count(values, digest) != 1 {
		t.Fatalf("the image not pinned:\n%s", values[:min(len(values), 400)])
	}
	if meta := string(files["oomguard/Chart.yaml"]); !strings.Contains(meta, "\nversion: 1.4.0\n") || !strings.Contains(meta, "\nappVersion: \"v1.4.0\"\n") ||
		!strings.Contains(meta, "  image: registry.example/oomguard@"+digest+"\n") || !strings.Contains(meta, "  artifacthub.io/prerelease: \"false\"\n") {
		t.Fatalf("Chart.yaml:\n%s", meta)
	}
	for _, f := range []string{"oomguard/values.schema.json", "oomguard/templates/daemonset.yaml", "oomguard/files/dashboard.json"} {
		if files[f] == nil {
			t.Errorf("%s not in the package", f)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	again, err := PackageChart(dir, m, "registry.example/oomguard", digest)
	if err != nil || !bytes.Equal(again.Archive, c.Archive) {
		t.Fatalf("packaged again, other bytes (%v)", err)
	}
	dev, err := PackageChart(dir, Meta{Version: "8debe8f-dirty", Created: m.Created}, "", "")
	if err != nil || dev.Version != "0.1.0" || !strings.Contains(string(untgz(t, dev.Archive)["oomguard/values.yaml"]), "repository: ghcr.io/oomguard/oomguard") {
		t.Fatalf("a release that is no version keeps the chart's version and repository: %v %+v", err, dev)
	}
	for version, pre := range map[string]string{"8debe8f-dirty": "true", "v1.5.0-rc.1": "true", "v1.5.0": "false"} {
		c, err := PackageChart(dir, Meta{Version: version, Created: m.Created}, "", "")
		if err != nil || !strings.Contains(string(untgz(t, c.Archive)["oomguard/Chart.yaml"]), "  artifacthub.io/prerelease: \""+pre+"\"\n") {
			t.Errorf("%s: want artifacthub.io/prerelease %s (%v)", version, pre, err)
		}
	}
	if _, err := PackageChart(t.TempDir(), m, "", ""); err == nil || !strings.Contains(err.Error(), "is no chart") {
		t.Fatalf("an empty directory: %v", err)
	}
}

// untgz is each file of a package, checking the headers are the same.
func untgz(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Fatalf("gzip header with a time or a name: %v %q", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	last := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name <= last || h.Mode != 0o644 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Fatalf("header %+v after %s", h, last)
		}
		last = h.Name
		files[h.Name], _ = io.ReadAll(tr)
	}
}
