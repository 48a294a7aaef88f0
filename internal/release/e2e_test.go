//go:build e2e

package release

import (
	"io"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/test/registrytest"
)

// Pushed to Debian's docker-registry, the index comes back with the digest
// the layout has, both platforms in it.
func TestE2EPushToRegistry(t *testing.T) {
	reg, err := registrytest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	ref := reg.Host + "/oomguard/oomguard:e2e"
	m := Meta{Version: "e2e", Commit: "abc", Created: time.Unix(1700000000, 0).UTC()}
	bin, out := fakeBinaries(t), t.TempDir()
	if err := Publish(io.Discard, bin, out, ref, m); err != nil {
		t.Fatal(err)
	}
	want, _, err := Build(bin, m)
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := want.Digest()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	gd, _ := got.Digest()
	im, err := got.IndexManifest()
	if err != nil || gd != wd || len(im.Manifests) != len(Arches) {
		t.Fatalf("pulled %s (%v, %d manifests), pushed %s", gd, err, len(im.Manifests), wd)
	}
}
