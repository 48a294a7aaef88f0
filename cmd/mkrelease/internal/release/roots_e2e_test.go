//go:build e2e

package release

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/testbin"
)

// The release image's own imagepatch, in a root holding nothing but the
// image (no host trust store), verifies a registry by the image's root
// bundle: a registry whose CA is not in it fails saying what to do; with a
// test root added to the bundle the way its roots are (a PEM in the file),
// the same binary trusts it.
func TestE2EImageTrustsItsRootBundle(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot)")
	}
	repo, _ := filepath.Abs("../../../..")
	img, err := testbin.ReleaseImage(filepath.Join(repo, "build", "image"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	untar := exec.Command("tar", "-x", "-C", root)
	untar.Stdin = mutate.Extract(img)
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("unpack the image: %v\n%s", err, out)
	}
	bundle, err := os.ReadFile(filepath.Join(root, RootsPath))
	if err != nil {
		t.Fatal(err)
	}
	if n := certs(t, bundle); n < 100 {
		t.Fatalf("the image's root bundle holds %d roots, want Mozilla's (over 100)", n)
	}

	reg, err := registrytest.StartWith(t.TempDir(), registrytest.Options{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	ref := reg.Host + "/app:v1"
	small, _ := random.Image(512, 1)
	if err := remote.Write(must(name.ParseReference(ref)), small, remote.WithTransport(reg.Transport())); err != nil {
		t.Fatal(err)
	}
	plan := func() (string, error) {
		cmd := exec.Command("/usr/local/bin/imagepatch", "plan", ref)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/local/bin"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := plan(); err == nil || !strings.Contains(out, "--ca-file") {
		t.Fatalf("a registry whose CA the image does not trust: %v, want a failure saying to give its CA with --ca-file:\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, RootsPath), append(bundle, reg.CAPEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := plan(); err != nil || strings.Contains(out, "certificate") {
		t.Fatalf("with the registry's root in the image's bundle: %v\n%s", err, out)
	}
}

func certs(t *testing.T, b []byte) int {
	n := 0
	for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			t.Fatalf("root %d of the bundle: %v", n, err)
		}
		n++
	}
	return n
}
