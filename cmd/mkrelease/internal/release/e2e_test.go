//go:build e2e

package release

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/testbin"
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
	if _, err := Publish(io.Discard, bin, out, ref, m); err != nil {
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

// make release with the binaries make image built, twice: the same bytes;
// pushed to Debian's docker-registry when asked, the image by its digest
// and the chart as helm pulls it (oci://, plain HTTP), which the real helm
// renders with the pushed repository pinned to that digest.
func TestE2ERelease(t *testing.T) {
	repo, _ := filepath.Abs("../../../..")
	bin := filepath.Join(repo, "build", "image-bin")
	helm := testbin.ComponentFor(t, "helm", "helm")
	for _, p := range []string{filepath.Join(bin, "amd64", "imagepatch")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run make image components", err)
		}
	}
	m := Meta{Version: "v0.9.1", Commit: "abc", Created: time.Unix(1700000000, 0).UTC()}
	o := Options{Bin: bin, Chart: filepath.Join(repo, "deploy", "helm", "oomguard"), Meta: m}
	var outs []string
	for range 2 {
		o.Out = filepath.Join(t.TempDir(), "release")
		if err := Release(io.Discard, o); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o.Out)
	}
	sums, _ := os.ReadFile(filepath.Join(outs[0], "SHA256SUMS"))
	for _, f := range append(strings.Fields(string(sums)), "SHA256SUMS") {
		if len(f) == 64 {
			continue // a sum
		}
		a, err := os.ReadFile(filepath.Join(outs[0], f))
		b, _ := os.ReadFile(filepath.Join(outs[1], f))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s differs between two releases of the same commit (%v)", f, err)
		}
	}
	check := exec.Command("sha256sum", "--check", "--quiet", "SHA256SUMS")
	check.Dir = outs[0]
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum --check: %v\n%s", err, out)
	}

	reg, err := registrytest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	o.Out, o.PushImage, o.PushChart = filepath.Join(t.TempDir(), "release"), reg.Host+"/oomguard/oomguard:v0.9.1", "oci://"+reg.Host+"/charts"
	o.NameOptions = []name.Option{name.Insecure}
	var said bytes.Buffer
	if err := Release(&said, o); err != nil {
		t.Fatal(err)
	}
	want, _, _ := Build(bin, m)
	wd, _ := want.Digest()
	got, err := remote.Index(must(name.ParseReference(reg.Host+"/oomguard/oomguard@"+wd.String(), name.Insecure)))
	if err != nil {
		t.Fatalf("the pushed image by its digest: %v\n%s", err, said.String())
	}
	if gd, _ := got.Digest(); gd != wd {
		t.Fatalf("pushed %s, want %s", gd, wd)
	}
	home := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, args...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	chart := "oci://" + reg.Host + "/charts/oomguard"
	if out := run("show", "chart", chart, "--version", "0.9.1", "--plain-http"); !strings.Contains(out, "appVersion: v0.9.1") {
		t.Fatalf("helm show chart %s:\n%s", chart, out)
	}
	rendered := run("template", "oomguard", chart, "--version", "0.9.1", "--plain-http", "--namespace", "kube-system")
	if n := strings.Count(rendered, "image: "+reg.Host+"/oomguard/oomguard@"+wd.String()); n == 0 || n != strings.Count(rendered, "image: ") {
		t.Fatalf("the pulled chart's images, want all %s/oomguard/oomguard@%s:\n%s", reg.Host, wd, grepLines(rendered, "image: "))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
