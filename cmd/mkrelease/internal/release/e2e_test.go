//go:build e2e

package release

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	cosign := testbin.ComponentFor(t, "cosign", "cosign")
	keys := t.TempDir()
	gen := exec.Command(cosign, "generate-key-pair")
	gen.Dir, gen.Env = keys, append(os.Environ(), "COSIGN_PASSWORD=e2e")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	o.Out, o.PushImage, o.PushChart = filepath.Join(t.TempDir(), "release"), reg.Host+"/oomguard/oomguard:v0.9.1", "oci://"+reg.Host+"/charts"
	o.NameOptions = []name.Option{name.Insecure}
	// As make release SIGN_KEY=cosign.key runs it, the password in $COSIGN_PASSWORD.
	mk := exec.Command("go", "run", filepath.Join(repo, "cmd", "mkrelease"), "--bin", bin, "--chart", o.Chart, "--out", o.Out,
		"--release", m.Version, "--commit", m.Commit, "--created", "1700000000", "--push-image", o.PushImage, "--push-chart", o.PushChart,
		"--sign-key", filepath.Join(keys, "cosign.key"))
	mk.Env = append(os.Environ(), "COSIGN_PASSWORD=e2e")
	said, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("mkrelease --sign-key: %v\n%s", err, said)
	}
	want, _, _ := Build(bin, m)
	wd, _ := want.Digest()
	got, err := remote.Index(must(name.ParseReference(reg.Host+"/oomguard/oomguard@"+wd.String(), name.Insecure)))
	if err != nil {
		t.Fatalf("the pushed image by its digest: %v\n%s", err, said)
	}
	if gd, _ := got.Digest(); gd != wd {
		t.Fatalf("pushed %s, want %s", gd, wd)
	}
	// The layout as skopeo reads one (oci:DIR:REF), copied whole: the same index.
	cp := exec.Command("skopeo", "copy", "--all", "--preserve-digests", "--dest-tls-verify=false",
		"oci:"+filepath.Join(outs[0], "image")+":"+m.Version, "docker://"+reg.Host+"/oomguard/skopeo:"+m.Version)
	if out, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy the release's OCI layout: %v\n%s", err, out)
	}
	if got, err := remote.Index(must(name.ParseReference(reg.Host+"/oomguard/skopeo:"+m.Version, name.Insecure))); err != nil {
		t.Fatal(err)
	} else if gd, _ := got.Digest(); gd != wd {
		t.Fatalf("skopeo copied %s, want %s", gd, wd)
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
	// Everything signed verifies with the real cosign and the key's public half, as docs/release.md tells a user.
	pub := filepath.Join(keys, "cosign.pub")
	verify := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cosign, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cosign %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	image := reg.Host + "/oomguard/oomguard@" + wd.String()
	verify("verify", "--key", pub, "--insecure-ignore-tlog", "--allow-http-registry", image)
	for typ, want := range map[string]string{"spdxjson": `"spdxVersion":"SPDX-2.3"`, "slsaprovenance1": `"commit":"abc"`} {
		out := verify("verify-attestation", "--key", pub, "--insecure-ignore-tlog", "--allow-http-registry", "--type", typ, image)
		var env struct{ Payload []byte }
		err := errors.New("no envelope")
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "{") {
				err = json.Unmarshal([]byte(l), &env)
				break
			}
		}
		if err != nil || !bytes.Contains(env.Payload, []byte(want)) ||
			!bytes.Contains(env.Payload, []byte(wd.Hex)) {
			t.Fatalf("cosign verify-attestation --type %s: want a statement about %s holding %s (%v):\n%s", typ, wd, want, err, out)
		}
	}
	chartDigest := regexp.MustCompile(`pushed the chart \S+@(sha256:[0-9a-f]{64})`).FindSubmatch(said)
	if chartDigest == nil {
		t.Fatalf("mkrelease said no chart digest:\n%s", said)
	}
	verify("verify", "--key", pub, "--insecure-ignore-tlog", "--allow-http-registry", reg.Host+"/charts/oomguard@"+string(chartDigest[1]))
	verify("verify-blob", "--key", pub, "--insecure-ignore-tlog", "--signature", filepath.Join(o.Out, "SHA256SUMS.sig"), filepath.Join(o.Out, "SHA256SUMS"))
	// A SHA256SUMS changed after signing does not verify.
	forged := filepath.Join(t.TempDir(), "SHA256SUMS")
	os.WriteFile(forged, append(must(os.ReadFile(filepath.Join(o.Out, "SHA256SUMS"))), "0000  evil\n"...), 0o644)
	if out, err := exec.Command(cosign, "verify-blob", "--key", pub, "--insecure-ignore-tlog", "--signature", filepath.Join(o.Out, "SHA256SUMS.sig"), forged).CombinedOutput(); err == nil {
		t.Fatalf("cosign verified a changed SHA256SUMS:\n%s", out)
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
