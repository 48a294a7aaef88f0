package release

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func fakeBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, a := range Arches {
		for _, p := range Programs {
			f := filepath.Join(dir, a, p)
			os.MkdirAll(filepath.Dir(f), 0o755)
			if err := os.WriteFile(f, []byte(a+"/"+p+" bytes"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// The same binaries and commit give the same digest, whenever built.
func TestBuildIsReproducible(t *testing.T) {
	bin := fakeBinaries(t)
	m := Meta{Version: "v1.2.3", Commit: "abc", Created: time.Unix(1700000000, 0).UTC()}
	a, _, err := Build(bin, m)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	b, _, err := Build(bin, m)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds: %s and %s", da, db)
	}
	m.Commit = "def"
	c, _, _ := Build(bin, m)
	if dc, _ := c.Digest(); dc == da {
		t.Fatal("another commit gave the same digest")
	}
}

func TestBuildHoldsBothPlatforms(t *testing.T) {
	m := Meta{Version: "v1", Commit: "abc", Created: time.Unix(0, 0).UTC()}
	idx, sizes, err := Build(fakeBinaries(t), m)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(Arches) || im.Annotations["org.opencontainers.image.revision"] != "abc" || im.Annotations["org.opencontainers.image.source"] != "https://github.com/oomguard/oomguard" || im.Annotations["org.opencontainers.image.description"] == "" {
		t.Fatalf("index: %+v", im)
	}
	for i, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != Arches[i] {
			t.Fatalf("manifest %d platform %+v", i, d.Platform)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != Arches[i] || cf.Config.Entrypoint[0] != "/usr/local/bin/oomguard-nri" || !cf.Created.Equal(m.Created) {
			t.Fatalf("config %+v", cf)
		}
		if sizes[Arches[i]][1] == 0 {
			t.Fatalf("sizes %v", sizes)
		}
	}
}

func TestBuildNamesAMissingBinary(t *testing.T) {
	bin := fakeBinaries(t)
	os.Remove(filepath.Join(bin, "arm64", "oomguard-hook"))
	if _, _, err := Build(bin, Meta{}); err == nil {
		t.Fatal("want an error for a missing binary")
	}
}
