//go:build e2e

package imagepatch

// The images platform teams really have (issue 34), built the way users
// build them (test/imagebuild: Debian bookworm from Debian's packages with
// debootstrap, buildah, Docker and OCI formats, gzip and zstd, multi-arch
// lists with a Windows entry), signed with the real cosign, in Debian's
// registry (2.8) and distribution v3, plain and with TLS from a private CA
// and basic auth; patched by the built imagepatch and its webhook, and the
// patched systemd image run with podman and with runc.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/oomguard/oomguard/test/imagebuild"
	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/testbin"
	"github.com/oomguard/oomguard/test/webhooktest"
)

// The image set, built once per machine (build/images) and once per test
// binary opened.
var (
	realOnce sync.Once
	realSet  *imagebuild.Set
	realErr  error
)

func realImages(t *testing.T) *imagebuild.Set {
	t.Helper()
	realOnce.Do(func() {
		realSet, realErr = imagebuild.Build(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	})
	if realErr != nil {
		t.Fatal(realErr)
	}
	return realSet
}

// flavour is a registry as the tests run it.
type flavour struct {
	name   string
	v3     bool // distribution v3, else Debian's 2.8
	secure bool // TLS from a private CA and basic auth
}

var (
	debianPlain  = flavour{"debian-2.8", false, false}
	debianSecure = flavour{"debian-2.8-tls-auth", false, true}
	v3Plain      = flavour{"distribution-v3", true, false}
	v3Secure     = flavour{"distribution-v3-tls-auth", true, true}
)

// realRig is one registry, its credentials and CA as a user has them
// (a Docker config, a CA file), and the built imagepatch.
type realRig struct {
	t        *testing.T
	reg      *registrytest.Registry
	bin      string
	dir      string
	env      []string // DOCKER_CONFIG, and SSL_CERT_FILE for cosign and crane
	flags    []string // --insecure, or --ca-file
	nameOpts []name.Option
	secure   bool
}

func newRealRig(t *testing.T, f flavour) *realRig {
	t.Helper()
	o := registrytest.Options{}
	if f.v3 {
		bin, err := registrytest.DistributionV3()
		if err != nil {
			t.Fatal(err)
		}
		o.Binary = bin
	}
	if f.secure {
		o.TLS, o.User, o.Password = true, "platform", "s3cret-"+f.name
	}
	dir := t.TempDir()
	reg, err := registrytest.StartWith(filepath.Join(dir, "registry"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	r := &realRig{t: t, reg: reg, bin: buildCLI(t), dir: dir, secure: f.secure}
	cfg, err := reg.DockerConfig(filepath.Join(dir, "docker"))
	if err != nil {
		t.Fatal(err)
	}
	r.env = []string{"DOCKER_CONFIG=" + cfg}
	if f.secure {
		r.flags = []string{"--ca-file", reg.CAFile}
		r.env = append(r.env, "SSL_CERT_FILE="+reg.CAFile)
	} else {
		r.flags = []string{"--insecure"}
		r.nameOpts = []name.Option{name.Insecure}
	}
	return r
}

func (r *realRig) ref(s string) string { return r.reg.Host + "/" + s }

func (r *realRig) tag(s string) name.Tag {
	r.t.Helper()
	tag, err := name.NewTag(r.ref(s), r.nameOpts...)
	if err != nil {
		r.t.Fatal(err)
	}
	return tag
}

// put writes the set's image or index setRef (NAME:FORMAT) as repo:tag,
// returning its digest.
func (r *realRig) put(set *imagebuild.Set, repoTag, setRef string) v1.Hash {
	r.t.Helper()
	d, err := set.Get(setRef)
	if err != nil {
		r.t.Fatal(err)
	}
	if d.MediaType.IsIndex() {
		idx, err := set.Index(setRef)
		if err != nil {
			r.t.Fatal(err)
		}
		r.putIndex(repoTag, idx)
	} else {
		img, err := set.Image(setRef)
		if err != nil {
			r.t.Fatal(err)
		}
		r.putImage(repoTag, img)
	}
	return d.Digest
}

func (r *realRig) putImage(repoTag string, img v1.Image) v1.Hash {
	r.t.Helper()
	if err := remote.Write(r.tag(repoTag), img, r.reg.RemoteOptions()...); err != nil {
		r.t.Fatalf("push %s: %v", repoTag, err)
	}
	d, _ := img.Digest()
	return d
}

func (r *realRig) putIndex(repoTag string, idx v1.ImageIndex) v1.Hash {
	r.t.Helper()
	if err := remote.WriteIndex(r.tag(repoTag), idx, r.reg.RemoteOptions()...); err != nil {
		r.t.Fatalf("push %s: %v", repoTag, err)
	}
	d, _ := idx.Digest()
	return d
}

// realResult is a result as imagepatch --json prints it.
type realResult struct {
	Source      string   `json:"source"`
	Destination string   `json:"destination"`
	Action      string   `json:"action"`
	Digest      string   `json:"digest"`
	Base        string   `json:"base"`
	Upgraded    bool     `json:"upgraded"`
	Dropped     []string `json:"dropped"`
	Kept        []string `json:"kept"`
	Unpatched   []string `json:"unpatched"`
	Note        string   `json:"note"`
	Error       string   `json:"error"`
	Signature   string   `json:"signature"`
}

// imagepatch runs the built imagepatch COMMAND ARGS with the registry's
// flags and --json, as a user with its Docker config does.
func (r *realRig) imagepatch(args ...string) (code int, res []realResult, stderr string) {
	r.t.Helper()
	out, stderr, code := r.run(r.bin, append(append(slices.Clone(args), r.flags...), "--json")...)
	if len(out) > 0 {
		if err := json.Unmarshal(out, &res); err != nil {
			r.t.Fatalf("imagepatch %v --json: %v\n%s\n%s", args, err, out, stderr)
		}
	}
	return code, res, stderr
}

// run runs a program with the rig's environment: stdout, stderr, exit code.
func (r *realRig) run(bin string, args ...string) ([]byte, string, int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), r.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("%s: %v", bin, err)
	}
	return out.Bytes(), errb.String(), code
}

// cosign runs the real cosign (make components) with the rig's
// credentials and CA, and a key pair of the rig's own (COSIGN_PASSWORD).
func (r *realRig) cosign(args ...string) string {
	r.t.Helper()
	bin := testbin.ComponentFor(r.t, "cosign", "cosign")
	keys := filepath.Join(r.dir, "cosign")
	if _, err := os.Stat(filepath.Join(keys, "cosign.key")); err != nil {
		os.MkdirAll(keys, 0o700)
		cmd := exec.Command(bin, "generate-key-pair")
		cmd.Dir, cmd.Env = keys, append(os.Environ(), "COSIGN_PASSWORD=e2e")
		if out, err := cmd.CombinedOutput(); err != nil {
			r.t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
	}
	if !r.secure {
		args = append(args, "--allow-http-registry")
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "KEYS/", keys+"/")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = keys
	cmd.Env = append(append(os.Environ(), r.env...), "COSIGN_PASSWORD=e2e", "COSIGN_YES=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("cosign %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// sign signs repo@digest the ways cosign does: "sig" (a sha256-HEX.sig tag),
// "bundle" (cosign 3's default: the referrers API's fallback tag
// sha256-HEX), "att" (an in-toto attestation, sha256-HEX.att), and
// "recursive" (.sig, an index and each of its entries).
func (r *realRig) sign(repo string, digest v1.Hash, how string) {
	r.t.Helper()
	ref := r.ref(repo) + "@" + digest.String()
	noLog := []string{"--key", "KEYS/cosign.key", "--tlog-upload=false", "--use-signing-config=false"}
	switch how {
	case "sig":
		r.cosign(append(append([]string{"sign"}, noLog...), "--new-bundle-format=false", ref)...)
	case "recursive":
		r.cosign(append(append([]string{"sign"}, noLog...), "--new-bundle-format=false", "--recursive", ref)...)
	case "bundle":
		r.cosign(append(append([]string{"sign"}, noLog...), ref)...)
	case "att":
		pred := filepath.Join(r.dir, "provenance.json")
		os.WriteFile(pred, []byte(`{"builder":{"id":"https://ci.example/buildah"},"buildType":"https://ci.example/debootstrap"}`), 0o644)
		r.cosign(append(append([]string{"attest"}, noLog...), "--new-bundle-format=false", "--type", "slsaprovenance", "--predicate", pred, ref)...)
	default:
		r.t.Fatalf("sign %q", how)
	}
}

// verify says whether cosign verifies ref's signature with the rig's key.
func (r *realRig) verify(ref, key string, flags ...string) error {
	bin := testbin.ComponentFor(r.t, "cosign", "cosign")
	args := append(append([]string{"verify", "--key", key, "--insecure-ignore-tlog", "--insecure-ignore-sct"}, flags...), ref)
	if !r.secure {
		args = append(args, "--allow-http-registry")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), r.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cosign verify %s: %v\n%s", ref, err, out)
	}
	return nil
}

// artifactTag matches the tags of signatures, attestations and SBOMs
// cosign writes, and the referrers API's fallback tag.
var artifactTag = regexp.MustCompile(`^sha256-[0-9a-f]{64}(\.(sig|att|sbom))?$`)

// descriptor is what the registry holds at ref.
func (r *realRig) descriptor(ref string) *remote.Descriptor {
	r.t.Helper()
	p, err := name.ParseReference(ref, r.nameOpts...)
	if err != nil {
		r.t.Fatal(err)
	}
	d, err := remote.Get(p, r.reg.RemoteOptions()...)
	if err != nil {
		r.t.Fatalf("get %s: %v", ref, err)
	}
	return d
}

// resultBlobs are the manifests and blobs of the results pushed: what a
// patch result consists of.
func (r *realRig) resultBlobs(res []realResult) (tags, digests map[string]bool) {
	r.t.Helper()
	tags, digests = map[string]bool{}, map[string]bool{}
	addImage := func(img v1.Image) {
		d, _ := img.Digest()
		digests[d.String()] = true
		m, err := img.Manifest()
		if err != nil {
			r.t.Fatal(err)
		}
		digests[m.Config.Digest.String()] = true
		for _, l := range m.Layers {
			digests[l.Digest.String()] = true
		}
	}
	for _, x := range res {
		if x.Action != "push" || x.Destination == "" {
			continue
		}
		tags[x.Destination] = true
		d := r.descriptor(x.Destination)
		digests[d.Digest.String()] = true
		if d.MediaType.IsIndex() {
			idx, _ := d.ImageIndex()
			im, _ := idx.IndexManifest()
			for _, e := range im.Manifests {
				if img, err := idx.Image(e.Digest); err == nil {
					addImage(img)
				}
			}
		} else {
			img, _ := d.Image()
			addImage(img)
		}
	}
	return tags, digests
}

// checkWrites fails the test for every request in reqs that wrote to the
// registry something that is not part of a result pushed (its tag, its
// manifests, its configs and layers): nothing else is ever written.
func (r *realRig) checkWrites(reqs []registrytest.Request, res []realResult) {
	r.t.Helper()
	tags, digests := r.resultBlobs(res)
	destTags := map[string]bool{}
	for t := range tags {
		if p, err := name.NewTag(t, r.nameOpts...); err == nil {
			destTags["/v2/"+p.RepositoryStr()+"/manifests/"+p.TagStr()] = true
		}
	}
	bad := 0
	for _, q := range reqs {
		if q.Method == http.MethodGet || q.Method == http.MethodHead || q.Status >= 400 {
			continue
		}
		query, _ := url.ParseQuery(q.Query)
		ok := false
		switch {
		case strings.Contains(q.Path, "/manifests/"):
			ref := q.Path[strings.LastIndex(q.Path, "/")+1:]
			ok = q.Method == http.MethodPut && (destTags[q.Path] || digests[ref])
		case strings.Contains(q.Path, "/blobs/uploads/"):
			switch {
			case query.Get("mount") != "":
				ok = digests[query.Get("mount")]
			case query.Get("digest") != "":
				ok = digests[query.Get("digest")]
			default: // a session opened or filled; its PUT names the digest
				ok = q.Method == http.MethodPost || q.Method == http.MethodPatch
			}
		}
		if !ok {
			bad++
			if bad <= 20 {
				r.t.Errorf("a write that is not a patch result's: %s %s?%s (%d)", q.Method, q.Path, q.Query, q.Status)
			}
		}
	}
}

// checkNoLayerRead fails the test for every GET of a blob in layers.
func checkNoLayerRead(t *testing.T, reqs []registrytest.Request, layers map[string]bool) {
	t.Helper()
	for _, q := range reqs {
		if q.Method == http.MethodGet && strings.Contains(q.Path, "/blobs/sha256:") && layers[q.Path[strings.LastIndex(q.Path, "/")+1:]] {
			t.Errorf("a base layer was read: %s %s (%d bytes)", q.Method, q.Path, q.Out)
		}
	}
}

// setLayers is every layer digest of every image of the set.
func setLayers(t *testing.T, set *imagebuild.Set) map[string]bool {
	t.Helper()
	layers := map[string]bool{}
	add := func(img v1.Image) {
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range m.Layers {
			layers[l.Digest.String()] = true
		}
	}
	for _, ref := range imagebuild.Refs() {
		d, _ := set.Get(ref)
		if d.MediaType.IsIndex() {
			idx, _ := set.Index(ref)
			im, _ := idx.IndexManifest()
			for _, e := range im.Manifests {
				img, _ := idx.Image(e.Digest)
				add(img)
			}
		} else {
			img, _ := set.Image(ref)
			add(img)
		}
	}
	return layers
}

// checkPatched checks the result at dst against its source src, as the
// docs say a result is: the source's manifest and index formats, an index's
// linux/amd64 and linux/arm64 entries patched with one layer more and the
// shim in front of their entrypoint, another OS's entries as they were;
// lineage in the labels and, for OCI manifests and indexes, the standard
// annotations (never in a Docker manifest or list, which have none).
func (r *realRig) checkPatched(src, dst *remote.Descriptor, srcRef string) {
	r.t.Helper()
	if dst.MediaType != src.MediaType {
		r.t.Errorf("%s: the result is a %s, the source a %s", srcRef, dst.MediaType, src.MediaType)
	}
	if !src.MediaType.IsIndex() {
		si, _ := src.Image()
		di, _ := dst.Image()
		r.checkPatchedImage(srcRef, si, di, src.Digest)
		return
	}
	sidx, _ := src.ImageIndex()
	didx, _ := dst.ImageIndex()
	sm, _ := sidx.IndexManifest()
	dm, _ := didx.IndexManifest()
	if len(dm.Manifests) != len(sm.Manifests) {
		r.t.Errorf("%s: the result has %d entries, the source %d", srcRef, len(dm.Manifests), len(sm.Manifests))
	}
	checkLineage(r.t, srcRef, dst.MediaType, dst.Manifest, dm.Annotations, src.Digest)
	for _, se := range sm.Manifests {
		var de *v1.Descriptor
		for i := range dm.Manifests {
			if dm.Manifests[i].Platform != nil && se.Platform != nil && dm.Manifests[i].Platform.Equals(*se.Platform) {
				de = &dm.Manifests[i]
			}
		}
		where := fmt.Sprintf("%s %s", srcRef, se.Platform)
		if de == nil {
			r.t.Errorf("%s: no entry in the result", where)
			continue
		}
		if se.Platform.OS != "linux" {
			if de.Digest != se.Digest {
				r.t.Errorf("%s: another OS's entry was changed: %s, was %s", where, de.Digest, se.Digest)
			}
			continue
		}
		si, _ := sidx.Image(se.Digest)
		di, _ := didx.Image(de.Digest)
		r.checkPatchedImage(where, si, di, se.Digest)
	}
}

func (r *realRig) checkPatchedImage(where string, src, dst v1.Image, srcDigest v1.Hash) {
	r.t.Helper()
	sm, err := src.Manifest()
	if err != nil {
		r.t.Fatal(err)
	}
	dm, err := dst.Manifest()
	if err != nil {
		r.t.Fatalf("%s: %v", where, err)
	}
	if len(dm.Layers) != len(sm.Layers)+1 {
		r.t.Errorf("%s: %d layers, the source %d: want exactly one more", where, len(dm.Layers), len(sm.Layers))
		return
	}
	for i := range sm.Layers {
		if dm.Layers[i].Digest != sm.Layers[i].Digest || dm.Layers[i].MediaType != sm.Layers[i].MediaType {
			r.t.Errorf("%s: layer %d is %s %s, the source's %s %s", where, i, dm.Layers[i].MediaType, dm.Layers[i].Digest, sm.Layers[i].MediaType, sm.Layers[i].Digest)
		}
	}
	pl := dm.Layers[len(dm.Layers)-1].MediaType
	if sm.MediaType == types.DockerManifestSchema2 && pl != types.DockerLayer || sm.MediaType != types.DockerManifestSchema2 && !strings.HasPrefix(string(pl), "application/vnd.oci.image.layer.") {
		r.t.Errorf("%s: the patch layer is a %s in a %s", where, pl, sm.MediaType)
	}
	scf, _ := src.ConfigFile()
	dcf, err := dst.ConfigFile()
	if err != nil {
		r.t.Fatalf("%s: %v", where, err)
	}
	if dcf.OS != scf.OS || dcf.Architecture != scf.Architecture || dcf.Variant != scf.Variant {
		r.t.Errorf("%s: platform %s/%s, was %s/%s", where, dcf.OS, dcf.Architecture, scf.OS, scf.Architecture)
	}
	if len(dcf.RootFS.DiffIDs) != len(scf.RootFS.DiffIDs)+1 {
		r.t.Errorf("%s: %d diff IDs for %d layers", where, len(dcf.RootFS.DiffIDs), len(dm.Layers))
	}
	ep := dcf.Config.Entrypoint
	if len(ep) < 2 || !strings.HasPrefix(ep[0], "/.oomguard/") || !slices.Equal(ep[len(ep)-len(scf.Config.Entrypoint):], scf.Config.Entrypoint) {
		r.t.Errorf("%s: entrypoint %q, the source's %q: want the shim in front of it", where, ep, scf.Config.Entrypoint)
	}
	if !slices.Equal(dcf.Config.Cmd, scf.Config.Cmd) {
		r.t.Errorf("%s: cmd %q, the source's %q", where, dcf.Config.Cmd, scf.Config.Cmd)
	}
	if got := dcf.Config.Labels[LabelBaseDigest]; got != srcDigest.String() {
		r.t.Errorf("%s: label %s=%q, want %s", where, LabelBaseDigest, got, srcDigest)
	}
	// History: the source's, and one entry for the one layer more.
	if len(dcf.History) != len(scf.History)+1 {
		r.t.Errorf("%s: %d history entries, the source %d", where, len(dcf.History), len(scf.History))
	}
	nonEmpty := 0
	for _, h := range dcf.History {
		if !h.EmptyLayer {
			nonEmpty++
		}
	}
	if nonEmpty != len(dm.Layers) {
		r.t.Errorf("%s: %d history entries with a layer for %d layers", where, nonEmpty, len(dm.Layers))
	}
	raw, _ := dst.RawManifest()
	checkLineage(r.t, where, dm.MediaType, raw, dm.Annotations, srcDigest)
}

// checkLineage: an OCI manifest or index records its base with the OCI
// standard annotations; a Docker one has no annotations field at all.
func checkLineage(t *testing.T, where string, mt types.MediaType, raw []byte, ann map[string]string, base v1.Hash) {
	t.Helper()
	switch mt {
	case types.DockerManifestSchema2, types.DockerManifestList:
		var fields map[string]json.RawMessage
		json.Unmarshal(raw, &fields)
		if _, ok := fields["annotations"]; ok {
			t.Errorf("%s: a %s with an annotations field, which its schema does not have", where, mt)
		}
	default:
		if ann["org.opencontainers.image.base.digest"] != base.String() || ann["org.opencontainers.image.base.name"] == "" {
			t.Errorf("%s: annotations %v, want org.opencontainers.image.base.digest=%s and .base.name", where, ann, base)
		}
	}
}

// seedRepo pushes every image of the set as a tag of repo (NAME-FORMAT)
// and signs some of them every way cosign does: the repository a team has.
func (r *realRig) seedRepo(set *imagebuild.Set, repo string) map[string]v1.Hash {
	r.t.Helper()
	digests := map[string]v1.Hash{}
	for _, ref := range imagebuild.Refs() {
		tag := strings.ReplaceAll(ref, ":", "-")
		digests[tag] = r.put(set, repo+":"+tag, ref)
	}
	r.sign(repo, digests["systemd-oci-zstd"], "sig")
	r.sign(repo, digests["systemd-docker-gzip"], "bundle")
	r.sign(repo, digests["minimal-oci-gzip"], "att")
	r.sign(repo, digests["index-oci-gzip"], "recursive")
	return digests
}

// TestE2ERealImages: a repository of real images (every format, the lists
// with their arm64 and Windows entries) signed every way cosign signs, in
// each registry: plan writes nothing; apply --repo patches every image tag,
// skips the signatures' tags, passes the Windows entries through, keeps
// formats and records lineage, writes nothing but its results and reads no
// layer; again, it writes nothing at all.
func TestE2ERealImages(t *testing.T) {
	set := realImages(t)
	layers := setLayers(t, set)
	for _, f := range []flavour{debianPlain, debianSecure, v3Plain, v3Secure} {
		t.Run(f.name, func(t *testing.T) {
			r := newRealRig(t, f)
			const repo = "ml/base"
			digests := r.seedRepo(set, repo)
			tags := slices.Sorted(maps.Keys(digests))
			r.reg.Reset()

			code, res, stderr := r.imagepatch("plan", "--repo", r.ref(repo))
			if code != 0 || len(res) != len(tags) {
				t.Errorf("plan: exit %d, %d results for %d image tags: %+v\n%s", code, len(res), len(tags), res, stderr)
			}
			for _, q := range r.reg.Requests() {
				if q.Method != http.MethodGet && q.Method != http.MethodHead {
					t.Errorf("plan wrote: %s %s", q.Method, q.Path)
				}
			}

			r.reg.Reset()
			start := time.Now()
			code, res, stderr = r.imagepatch("apply", "--repo", r.ref(repo))
			took := time.Since(start)
			reqs := r.reg.Requests()
			if code != 0 {
				t.Errorf("apply --repo: exit %d\n%s", code, stderr)
			}
			pushed := map[string]realResult{}
			for _, x := range res {
				src, _ := name.NewTag(x.Source, r.nameOpts...)
				switch {
				case artifactTag.MatchString(src.TagStr()):
					if x.Action == "push" || x.Action == "failed" || x.Action == "refused" {
						t.Errorf("a signature's tag treated as an image: %+v", x)
					}
				case x.Action != "push":
					t.Errorf("%s: %s %s %s", x.Source, x.Action, x.Error, x.Note)
				default:
					pushed[src.TagStr()] = x
				}
			}
			if len(pushed) != len(tags) {
				t.Errorf("%d of %d image tags patched", len(pushed), len(tags))
			}
			t.Logf("apply --repo: %d tags (and %d of signatures) in %s, %d requests", len(tags), countArtifactTags(t, r, repo), took.Round(time.Millisecond), len(reqs))
			r.checkWrites(reqs, res)
			checkNoLayerRead(t, reqs, layers)
			for _, tag := range tags {
				x, ok := pushed[tag]
				if !ok {
					continue
				}
				src := r.descriptor(r.ref(repo + ":" + tag))
				dst := r.descriptor(x.Destination)
				if dst.Digest.String() != x.Digest {
					t.Errorf("%s: result digest %s, the tag holds %s", tag, x.Digest, dst.Digest)
				}
				r.checkPatched(src, dst, tag)
				if tag == "index-oci-gzip" || tag == "index-oci-zstd" {
					said := strings.Join(append(append(slices.Clone(x.Kept), x.Unpatched...), x.Note), " ")
					if !strings.Contains(said, "windows") {
						t.Errorf("%s: the Windows entry passed through, not said: %+v", tag, x)
					}
				}
			}
			// The source's signatures are the source's: still there, still good.
			if err := r.verify(r.ref(repo)+"@"+digests["systemd-oci-zstd"].String(), filepath.Join(r.dir, "cosign", "cosign.pub")); err != nil {
				t.Error(err)
			}

			// Again: nothing written.
			r.reg.Reset()
			code, res, stderr = r.imagepatch("apply", "--repo", r.ref(repo))
			for _, x := range res {
				if x.Action == "push" || x.Action == "failed" || x.Action == "refused" {
					t.Errorf("re-apply: %+v", x)
				}
			}
			if w := writes(r.reg.Requests()); code != 0 || len(w) != 0 {
				t.Errorf("re-apply: exit %d, writes %v\n%s", code, w, stderr)
			}

			// The summary a user reads.
			out, stderr2, code := r.run(r.bin, append([]string{"plan", "--repo", r.ref(repo)}, r.flags...)...)
			if code != 0 || strings.Contains(string(out), `\n`) {
				t.Errorf("plan's summary: exit %d, a literal \\n:\n%s\n%s", code, out, stderr2)
			}
		})
	}
}

func countArtifactTags(t *testing.T, r *realRig, repo string) int {
	tags, err := remote.List(r.tag(repo+":x").Context(), r.reg.RemoteOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tag := range tags {
		if artifactTag.MatchString(tag) {
			n++
		}
	}
	return n
}

// writes are the requests that wrote: method and path.
func writes(reqs []registrytest.Request) []string {
	var w []string
	for _, q := range reqs {
		if q.Method != http.MethodGet && q.Method != http.MethodHead && q.Status < 400 {
			w = append(w, q.Method+" "+q.Path)
		}
	}
	return w
}

// specVersion writes the built-in spec with another version: an upgrade.
func specVersion(t *testing.T, version string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "spec.toml")
	b := bytes.Replace(ShimSpecTOML(), []byte(`version = "`+ShimSpec().Version+`"`), []byte(`version = "`+version+`"`), 1)
	if bytes.Equal(b, ShimSpecTOML()) {
		t.Fatal("the built-in spec has no version line to change")
	}
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestE2ERealImagesUpgrade: a new patch version over a repository whose
// selector also matches the old results (every tag, as a first run with
// no selector has it): every source and every old result is recognised,
// the new results each carry one patch layer, and a second run writes
// nothing.
func TestE2ERealImagesUpgrade(t *testing.T) {
	set := realImages(t)
	r := newRealRig(t, v3Secure)
	const repo = "ml/upgrade"
	for _, ref := range []string{"systemd:oci-zstd", "systemd:docker-gzip", "index:docker-gzip", "index:oci-zstd"} {
		r.put(set, repo+":"+strings.ReplaceAll(ref, ":", "-"), ref)
	}
	code, res, stderr := r.imagepatch("apply", "--repo", r.ref(repo))
	if code != 0 || len(res) != 4 {
		t.Fatalf("first patch: exit %d %+v\n%s", code, res, stderr)
	}
	next := ShimSpec().Version + "0"
	spec := specVersion(t, next)
	r.reg.Reset()
	code, res, stderr = r.imagepatch("apply", "--spec", spec, "--repo", r.ref(repo))
	reqs := r.reg.Requests()
	if code != 0 {
		t.Errorf("upgrade over every tag: exit %d\n%s", code, stderr)
	}
	newResults := map[string]realResult{}
	for _, x := range res {
		switch x.Action {
		case "push", "unchanged", "skipped":
		default:
			t.Errorf("upgrade: %+v", x)
		}
		if x.Action == "push" {
			if !strings.HasSuffix(x.Destination, "-oomguard-init."+next) {
				t.Errorf("upgrade result named %s", x.Destination)
			}
			newResults[x.Destination] = x
		}
	}
	if len(newResults) != 4 {
		t.Errorf("%d new results, want one per source (4): %+v", len(newResults), res)
	}
	r.checkWrites(reqs, res)
	for _, ref := range []string{"systemd:oci-zstd", "systemd:docker-gzip", "index:docker-gzip", "index:oci-zstd"} {
		tag := strings.ReplaceAll(ref, ":", "-")
		dst := r.ref(repo + ":" + tag + "-oomguard-init." + next)
		if _, ok := newResults[dst]; !ok {
			continue
		}
		r.checkPatched(r.descriptor(r.ref(repo+":"+tag)), r.descriptor(dst), tag)
	}
	r.reg.Reset()
	code, res, stderr = r.imagepatch("apply", "--spec", spec, "--repo", r.ref(repo))
	if w := writes(r.reg.Requests()); code != 0 || len(w) != 0 {
		t.Errorf("upgrade again: exit %d, writes %v, %+v\n%s", code, w, res, stderr)
	}
}

// TestE2ERealImagesMovedTag: a tag that moves to a new base is patched
// again under a name that cannot collide, the old result stays, resolve
// (by tag and by digest) and the webhook serve the new base's patch.
func TestE2ERealImagesMovedTag(t *testing.T) {
	set := realImages(t)
	r := newRealRig(t, debianPlain)
	const repo = "ml/moving"
	first := r.put(set, repo+":bookworm", "systemd:docker-gzip")
	code, res, stderr := r.imagepatch("apply", r.ref(repo+":bookworm"))
	if code != 0 || len(res) != 1 || res[0].Action != "push" {
		t.Fatalf("first: exit %d %+v\n%s", code, res, stderr)
	}
	old := res[0]
	w := startRealWebhook(t, r, "--tag-ttl", "1s")
	if got := waitPatched(t, w, r.ref(repo+":bookworm"), nil); got != r.ref(repo)+"@"+old.Digest {
		t.Errorf("the webhook serves %s for the tag, want %s", got, old.Digest)
	}

	// The tag moves: a rebuilt base.
	moved := r.put(set, repo+":bookworm", "systemd:oci-zstd")
	if moved == first {
		t.Fatal("the tag did not move")
	}
	r.reg.Reset()
	code, res, stderr = r.imagepatch("apply", r.ref(repo+":bookworm"))
	if code != 0 || len(res) != 1 || res[0].Action != "push" {
		t.Fatalf("after the move: exit %d %+v\n%s", code, res, stderr)
	}
	r.checkWrites(r.reg.Requests(), res)
	now := res[0]
	if now.Destination == old.Destination {
		t.Errorf("the moved tag's patch took the old result's name %s", now.Destination)
	}
	if d := r.descriptor(old.Destination); d.Digest.String() != old.Digest {
		t.Errorf("the old result %s now holds %s, was %s", old.Destination, d.Digest, old.Digest)
	}
	r.checkPatched(r.descriptor(r.ref(repo)+"@"+moved.String()), r.descriptor(now.Destination), "moved")
	if !strings.Contains(now.Note, "moved") && !strings.Contains(now.Note, "move") {
		t.Logf("the result does not say the tag moved: %+v", now)
	}
	// resolve, by tag and by digest.
	for _, ref := range []string{r.ref(repo + ":bookworm"), r.ref(repo) + "@" + moved.String()} {
		out, stderr, code := r.run(r.bin, append([]string{"resolve", ref}, r.flags...)...)
		if got := strings.TrimSpace(string(out)); code != 0 || got != r.ref(repo)+"@"+now.Digest {
			t.Errorf("resolve %s: exit %d %q, want %s\n%s", ref, code, got, now.Digest, stderr)
		}
	}
	// The webhook, past its tag TTL (it may answer from what it knew once
	// more while it looks again), serves the new base's patch.
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if got = waitPatched(t, w, r.ref(repo+":bookworm"), nil); got == r.ref(repo)+"@"+now.Digest {
			break
		}
	}
	if got != r.ref(repo)+"@"+now.Digest {
		t.Errorf("after the move the webhook serves %q, want %s (the old result is %s)", got, now.Digest, old.Digest)
	}
}

// TestE2ERealImagesRateLimit: behind a registry that allows 5 requests a
// second and answers the rest 429 with Retry-After, apply --jobs 8 of 8
// real images finishes every tag.
func TestE2ERealImagesRateLimit(t *testing.T) {
	set := realImages(t)
	r := newRealRig(t, debianPlain)
	const repo = "ml/limited"
	// Eight tags: every single image, and two more names of them, as a
	// repository has (latest, the release's name).
	refs := map[string]string{"latest": "systemd:oci-zstd", "bookworm": "minimal:docker-gzip"}
	for _, n := range []string{imagebuild.Minimal, imagebuild.Systemd} {
		for _, f := range imagebuild.Formats {
			refs[n+"-"+f] = n + ":" + f
		}
	}
	for tag, ref := range refs {
		r.put(set, repo+":"+tag, ref)
	}
	r.reg.Reset()
	r.reg.RateLimit(5, 1)
	start := time.Now()
	code, res, stderr := r.imagepatch("apply", "--repo", r.ref(repo), "--jobs", "8")
	took := time.Since(start)
	r.reg.RateLimit(0, 0)
	reqs := r.reg.Requests()
	limited := 0
	for _, q := range reqs {
		if q.Status == http.StatusTooManyRequests {
			limited++
		}
	}
	t.Logf("%d tags at 5 requests/s: exit %d in %s, %d requests, %d answered 429", len(refs), code, took.Round(time.Millisecond), len(reqs), limited)
	if a := realActions(res); code != 0 || a["push"] != len(refs) {
		t.Errorf("rate-limited apply: exit %d, %v\n%s", code, a, stderr)
		for _, x := range res {
			if x.Action != "push" {
				t.Logf("  %s: %s %s", x.Source, x.Action, x.Error)
			}
		}
	}
	if limited == 0 {
		t.Error("the registry never rate-limited the run: the test proves nothing")
	}
	// How long it took is reported, not asserted (a shared machine): at 5
	// a second the requests need len(reqs)/5 s.
	t.Logf("the requests that went through need %s at the registry's rate", time.Duration(len(reqs)-limited)*time.Second/5)
}

func realActions(res []realResult) map[string]int {
	m := map[string]int{}
	for _, x := range res {
		m[x.Action]++
	}
	return m
}

// ghostLayer is a layer that is only its descriptor: its blob is planted
// in the registry's storage, sparse, and nothing may read it.
type ghostLayer struct {
	digest v1.Hash
	size   int64
}

func (g ghostLayer) Digest() (v1.Hash, error) { return g.digest, nil }

// DiffID: a layer's uncompressed digest; nothing computes it from the data.
func (g ghostLayer) DiffID() (v1.Hash, error) { return g.digest, nil }
func (g ghostLayer) Compressed() (io.ReadCloser, error) {
	return nil, fmt.Errorf("the %d-byte layer %s must never be read", g.size, g.digest)
}
func (g ghostLayer) Uncompressed() (io.ReadCloser, error) { return g.Compressed() }
func (g ghostLayer) Size() (int64, error)                 { return g.size, nil }
func (g ghostLayer) MediaType() (types.MediaType, error)  { return types.OCILayer, nil }

// bigIndex pushes n tags of a CUDA-like index: the systemd image with a
// layer of size bytes more (planted sparse) for linux/amd64 and
// linux/arm64, and the Windows entry, each tag a build of its own.
func bigIndex(t *testing.T, r *realRig, set *imagebuild.Set, repo string, n int, size int64) v1.Hash {
	t.Helper()
	digest := registrytest.ZeroDigest(size)
	if err := r.reg.PlantBlob(repo, size, digest); err != nil {
		t.Fatal(err)
	}
	h, _ := v1.NewHash(digest)
	big := ghostLayer{h, size}
	src, err := set.Index(imagebuild.Index + ":oci-gzip")
	if err != nil {
		t.Fatal(err)
	}
	im, _ := src.IndexManifest()
	for i := range n {
		var adds []mutate.IndexAddendum
		for _, e := range im.Manifests {
			img, err := src.Image(e.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if e.Platform.OS == "linux" {
				img, err = mutate.Append(img, mutate.Addendum{Layer: big, History: v1.History{
					CreatedBy: "RUN /bin/sh -c apt-get install -y cuda-toolkit-12-4 cudnn9 # " + fmt.Sprint(size>>30) + " GiB", Created: v1.Time{Time: time.Unix(1700000000, 0)}}})
				if err != nil {
					t.Fatal(err)
				}
				cf, _ := img.ConfigFile()
				cf = cf.DeepCopy()
				cf.Config.Labels["build"] = fmt.Sprint(i)
				if img, err = mutate.ConfigFile(img, cf); err != nil {
					t.Fatal(err)
				}
			}
			adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: e.Platform}})
		}
		idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
		r.putIndex(fmt.Sprintf("%s:12.4-cudnn9-b%02d", repo, i), idx)
	}
	return h
}

// TestE2ERealImagesBigIndex: an index whose linux entries carry a 3 GiB
// layer (and a Windows entry) is patched, tag after tag, without a byte of
// that layer read (no GET of it at all), and the time and the requests a
// tag are reported, beside crane doing the same patch as a user scripts
// it (crane append + crane mutate per platform, crane index append), on
// the same registry in the same run.
func TestE2ERealImagesBigIndex(t *testing.T) {
	set := realImages(t)
	const tags, size = 16, 3 << 30
	for _, f := range []flavour{debianPlain, v3Secure} {
		t.Run(f.name, func(t *testing.T) {
			r := newRealRig(t, f)
			const repo = "ml/cuda"
			big := bigIndex(t, r, set, repo, tags, size)
			syncFS()
			r.reg.Reset()
			start := time.Now()
			code, res, stderr := r.imagepatch("apply", "--repo", r.ref(repo), "--jobs", "8")
			took := time.Since(start)
			reqs := r.reg.Requests()
			if a := realActions(res); code != 0 || a["push"] != tags {
				t.Errorf("apply: exit %d, %v\n%s", code, a, stderr)
				for _, x := range res {
					if x.Action != "push" {
						t.Logf("  %s: %s %s", x.Source, x.Action, x.Error)
						break
					}
				}
			}
			checkNoLayerRead(t, reqs, map[string]bool{big.String(): true})
			for _, q := range reqs {
				if strings.HasSuffix(q.Path, big.String()) && q.Method != http.MethodHead {
					t.Errorf("the %d-byte layer: %s %s", int64(size), q.Method, q.Path)
				}
			}
			r.checkWrites(reqs, res)
			if len(res) > 0 && res[0].Action == "push" {
				src, _ := name.NewTag(res[0].Source, r.nameOpts...)
				r.checkPatched(r.descriptor(src.String()), r.descriptor(res[0].Destination), src.TagStr())
			}
			t.Logf("imagepatch apply --jobs 8, %d tags of an index with a %d GiB layer (%s): %s, %.1f requests a tag: %s",
				tags, size>>30, f.name, took.Round(time.Millisecond), float64(len(reqs))/tags, kinds(reqs, tags))

			if f != debianPlain {
				return
			}
			// crane, as a user scripts the same patch, on the same tags.
			crane := testbin.ComponentFor(t, "distribution", "crane")
			craneTook, craneReqs, err := craneIndexLoop(t, r, crane, repo, tags)
			if err != nil {
				t.Fatal(err)
			}
			checkNoLayerRead(t, craneReqs, map[string]bool{big.String(): true})
			t.Logf("crane append + mutate per platform + index append, 8 at a time: %s, %.1f requests a tag: %s",
				craneTook.Round(time.Millisecond), float64(len(craneReqs))/tags, kinds(craneReqs, tags))
			t.Logf("imagepatch %.1f× faster, %.1f× fewer requests", float64(craneTook)/float64(took), float64(len(craneReqs))/float64(len(reqs)))
		})
	}
}

func syncFS() { exec.Command("sync").Run() }

// kinds is requests a tag by kind, most first.
func kinds(reqs []registrytest.Request, n int) string {
	m := map[string]int{}
	for _, q := range reqs {
		k := requestKind(q)
		if q.Status == http.StatusUnauthorized {
			k += " 401"
		}
		m[k]++
	}
	ks := slices.Collect(maps.Keys(m))
	sort.Slice(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] || m[ks[i]] == m[ks[j]] && ks[i] < ks[j] })
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(m[k])/float64(n)))
	}
	return strings.Join(parts, ", ")
}

// craneIndexLoop patches every tag of repo with crane: for each linux
// platform, crane append (the shim's layer for its architecture) and
// crane mutate (the shim in front of the entrypoint); then crane index
// append of the two and the Windows entry. The first tag alone (the
// patch layers go up once), then 8 at a time.
func craneIndexLoop(t *testing.T, r *realRig, crane, repo string, n int) (time.Duration, []registrytest.Request, error) {
	t.Helper()
	dir := t.TempDir()
	layerTar := map[string]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		l, err := ShimSpec().Layer(arch, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		layerTar[arch] = filepath.Join(dir, arch+".tar")
		os.WriteFile(layerTar[arch], b, 0o644)
	}
	insecure := []string{}
	if !r.secure {
		insecure = []string{"--insecure"}
	}
	c := func(args ...string) error {
		cmd := exec.Command(crane, append(args, insecure...)...)
		cmd.Env = append(os.Environ(), r.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("crane %v: %v\n%s", args, err, out)
		}
		return nil
	}
	one := func(i int) error {
		src := r.ref(fmt.Sprintf("%s:12.4-cudnn9-b%02d", repo, i))
		dst := src + "-crane"
		var entries []string
		for _, arch := range []string{"amd64", "arm64"} {
			tmp := dst + "-" + arch
			if err := c("append", "--platform", "linux/"+arch, "-b", src, "-f", layerTar[arch], "-t", tmp); err != nil {
				return err
			}
			if err := c("mutate", tmp, "--entrypoint", "/.oomguard/oomguard-init,--", "-t", tmp); err != nil {
				return err
			}
			entries = append(entries, "-m", tmp)
		}
		entries = append(entries, "-m", src+"-windows")
		return c(append(append([]string{"index", "append"}, entries...), "--flatten=false", "-t", dst)...)
	}
	// The Windows entry by a tag of its own (crane index append takes references).
	win := func(i int) error {
		src := r.ref(fmt.Sprintf("%s:12.4-cudnn9-b%02d", repo, i))
		d := r.descriptor(src)
		idx, _ := d.ImageIndex()
		im, _ := idx.IndexManifest()
		for _, e := range im.Manifests {
			if e.Platform.OS == "windows" {
				img, _ := idx.Image(e.Digest)
				return remote.Write(r.tag(fmt.Sprintf("%s:12.4-cudnn9-b%02d-windows", repo, i)), img, r.reg.RemoteOptions()...)
			}
		}
		return fmt.Errorf("%s has no windows entry", src)
	}
	for i := range n {
		if err := win(i); err != nil {
			return 0, nil, err
		}
	}
	syncFS()
	r.reg.Reset()
	start := time.Now()
	if err := one(0); err != nil {
		return 0, nil, err
	}
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := one(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 1; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		return 0, nil, err
	default:
	}
	return took, r.reg.Requests(), nil
}

// startRealWebhook runs the built webhook for the rig's registry, with its
// credentials (DOCKER_CONFIG) and CA, as the chart runs it.
func startRealWebhook(t *testing.T, r *realRig, args ...string) *webhooktest.Webhook {
	t.Helper()
	for _, e := range r.env {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}
	return webhooktest.StartT(t, r.bin, append(append(slices.Clone(r.flags), "--images", r.reg.Host+"/ml/*"), args...)...)
}

// webhookAnswer is the webhook's answer for a pod of one container running
// image (with command, if any): the image and command it sets, and its
// warnings.
func webhookAnswer(t *testing.T, w *webhooktest.Webhook, image string, command []string) (string, []string, []string) {
	t.Helper()
	c := map[string]any{"name": "main", "image": image}
	if command != nil {
		c["command"] = command
	}
	pod, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "p", "namespace": "ml"}, "spec": map[string]any{"containers": []any{c}}})
	body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
		"uid": "u-1", "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ml", "operation": "CREATE", "object": json.RawMessage(pod)}})
	b, err := w.Review(context.Background(), body)
	if err != nil {
		t.Fatal(err)
	}
	var rv struct {
		Response *struct {
			Allowed  bool     `json:"allowed"`
			Patch    []byte   `json:"patch"`
			Warnings []string `json:"warnings"`
		} `json:"response"`
	}
	if err := json.Unmarshal(b, &rv); err != nil || rv.Response == nil || !rv.Response.Allowed {
		t.Fatalf("answer %s: %v", b, err)
	}
	var ops []struct {
		Op, Path string
		Value    json.RawMessage
	}
	json.Unmarshal(rv.Response.Patch, &ops)
	var img string
	var cmd []string
	for _, o := range ops {
		switch o.Path {
		case "/spec/containers/0/image":
			json.Unmarshal(o.Value, &img)
		case "/spec/containers/0/command":
			json.Unmarshal(o.Value, &cmd)
		}
	}
	return img, cmd, rv.Response.Warnings
}

// waitPatched asks the webhook until it answers with a patched image
// (patches on demand finish in the background), for at most two minutes.
func waitPatched(t *testing.T, w *webhooktest.Webhook, image string, warnings *[]string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		img, _, warn := webhookAnswer(t, w, image, nil)
		if warnings != nil {
			*warnings = append(*warnings, warn...)
		}
		if img != "" || time.Now().After(deadline) {
			return img
		}
		time.Sleep(time.Second)
	}
}

// TestE2ERealImagesWebhook: the built webhook, with the registry's
// credentials and CA, runs pods of real images on their patches: a tag
// (the same digest the CLI's resolve gives), a signed image by digest, the
// OCI index with its Windows entry (kept as it was), and a command gets
// the shim in front; it writes nothing but patch results.
func TestE2ERealImagesWebhook(t *testing.T) {
	set := realImages(t)
	r := newRealRig(t, v3Secure)
	const repo = "ml/web"
	digests := map[string]v1.Hash{}
	for _, ref := range []string{"systemd:docker-gzip", "systemd:oci-zstd", "index:oci-zstd", "minimal:oci-gzip"} {
		digests[ref] = r.put(set, repo+":"+strings.ReplaceAll(ref, ":", "-"), ref)
	}
	r.sign(repo, digests["systemd:oci-zstd"], "sig")
	r.sign(repo, digests["index:oci-zstd"], "bundle")
	r.reg.Reset()
	w := startRealWebhook(t, r)

	var results []realResult
	check := func(image, wantTag string, src v1.Hash) {
		t.Helper()
		got := waitPatched(t, w, image, nil)
		if got == "" {
			t.Errorf("%s: not patched within two minutes", image)
			return
		}
		if !strings.HasPrefix(got, r.ref(repo)+"@sha256:") {
			t.Errorf("%s: the pod runs %s, want the patch by digest in %s", image, got, r.ref(repo))
			return
		}
		_, dg, _ := strings.Cut(got, "@")
		results = append(results, realResult{Action: "push", Destination: r.ref(repo + ":" + wantTag), Digest: dg})
		dst := r.descriptor(got)
		r.checkPatched(r.descriptor(r.ref(repo)+"@"+src.String()), dst, image)
		if d := r.descriptor(r.ref(repo + ":" + wantTag)); d.Digest.String() != dg {
			t.Errorf("%s: the webhook serves %s, its tag %s holds %s", image, dg, wantTag, d.Digest)
		}
	}
	suffix := "-oomguard-init." + ShimSpec().Version
	check(r.ref(repo+":systemd-docker-gzip"), "systemd-docker-gzip"+suffix, digests["systemd:docker-gzip"])
	check(r.ref(repo+":index-oci-zstd"), "index-oci-zstd"+suffix, digests["index:oci-zstd"])
	d := digests["systemd:oci-zstd"]
	check(r.ref(repo)+"@"+d.String(), "sha256-"+d.Hex+suffix, d)
	r.checkWrites(r.reg.Requests(), results)

	// resolve gives the webhook's digest.
	out, stderr, code := r.run(r.bin, append([]string{"resolve", r.ref(repo + ":systemd-docker-gzip")}, r.flags...)...)
	if want := r.descriptor(r.ref(repo + ":systemd-docker-gzip" + suffix)).Digest.String(); code != 0 || !strings.HasSuffix(strings.TrimSpace(string(out)), want) {
		t.Errorf("resolve: exit %d %q, want …@%s\n%s", code, out, want, stderr)
	}

	// A command gets the shim in front of it.
	waitPatched(t, w, r.ref(repo+":minimal-oci-gzip"), nil)
	img, cmd, warn := webhookAnswer(t, w, r.ref(repo+":minimal-oci-gzip"), []string{"/bin/echo", "hi"})
	if img == "" || len(cmd) < 3 || !strings.HasPrefix(cmd[0], "/.oomguard/") || !slices.Equal(cmd[len(cmd)-2:], []string{"/bin/echo", "hi"}) {
		t.Errorf("a command: image %q, command %q, warnings %q", img, cmd, warn)
	}
}

// podmanRig is Debian's podman with storage and hooks of its own (none: a
// host hook installed by another test must not touch these containers),
// runc, and the registry's credentials and CA.
type podmanRig struct {
	t    *testing.T
	dir  string
	base []string
	pull []string
}

func newPodman(t *testing.T, r *realRig) *podmanRig {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman is not installed (make deps): %v", err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("runc is not installed (make deps): %v", err)
	}
	dir, err := os.MkdirTemp("", "ogreal-")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "hooks"), 0o755)
	p := &podmanRig{t: t, dir: dir, base: []string{"--root", dir + "/storage", "--runroot", dir + "/run", "--storage-driver", "overlay",
		"--runtime", runc, "--cgroup-manager", "cgroupfs", "--events-backend", "none", "--hooks-dir", dir + "/hooks"}}
	if r.secure {
		certs, err := r.reg.CertDir(filepath.Join(dir, "certs"))
		if err != nil {
			t.Fatal(err)
		}
		p.pull = []string{"--cert-dir", certs, "--creds", r.reg.User + ":" + r.reg.Password}
	} else {
		p.pull = []string{"--tls-verify=false"}
	}
	t.Cleanup(func() {
		p.podman("rm", "-af", "-t", "0")
		p.podman("rmi", "-af")
		exec.Command("umount", "-R", dir+"/storage/overlay").Run()
		os.RemoveAll(dir)
	})
	return p
}

func (p *podmanRig) podman(args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", append(slices.Clone(p.base), args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		fmt.Fprintf(&out, "%v", err)
	}
	return out.String(), code
}

func (p *podmanRig) pullImage(ref string) {
	p.t.Helper()
	if out, code := p.podman(append(append([]string{"pull", "-q"}, p.pull...), ref)...); code != 0 {
		p.t.Fatalf("podman pull %s: exit %d\n%s", ref, code, out)
	}
}

// Root here lacks CAP_SYS_RESOURCE: ulimits below the hard limits podman
// would otherwise raise to.
var podmanLimits = []string{"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000", "--network", "none"}

// bootReport is what the boot script saw inside a systemd container.
type bootReport struct {
	state, exe string
	self       string
	procs      map[string][3]string // pid: ppid, comm, oom_score_adj
	services   map[string]string    // running unit: main pid
	raw        string
}

// bootScript waits for systemd to finish booting, then lists every process
// with shell builtins only (nothing it starts is in the list but itself),
// then each running service's main process.
const bootScript = `for i in $(seq 1 150); do s=$(systemctl is-system-running 2>/dev/null); case "$s" in running|degraded) break;; esac; sleep 0.1; done
echo "state $s"
echo "self $$"
for d in /proc/[0-9]*; do
  p=${d#/proc/}; pp=; c=; a=
  while read -r k v; do [ "$k" = PPid: ] && pp=$v; done < $d/status 2>/dev/null
  read -r c < $d/comm 2>/dev/null; read -r a < $d/oom_score_adj 2>/dev/null
  echo "proc $p $pp $c $a"
done
echo "exe $(readlink /proc/1/exe)"
for u in $(systemctl list-units --type=service --state=running --no-legend --plain | cut -d' ' -f1); do echo "service $u $(systemctl show -p MainPID --value $u)"; done
`

func parseBoot(out string) bootReport {
	b := bootReport{procs: map[string][3]string{}, services: map[string]string{}, raw: out}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "state" && len(f) > 1:
			b.state = f[1]
		case f[0] == "self" && len(f) > 1:
			b.self = f[1]
		case f[0] == "exe" && len(f) > 1:
			b.exe = f[1]
		case f[0] == "proc" && len(f) == 5:
			b.procs[f[1]] = [3]string{f[2], f[3], f[4]}
		case f[0] == "service" && len(f) == 3:
			b.services[f[1]] = f[2]
		}
	}
	return b
}

// checkBoot: PID 1 is the image's systemd, it booted, the services a
// systemd image runs are running, and every process (the check's own
// shell aside: an exec'd process takes the spec's score) has score want;
// or, for the source (want ""), none has the shim's 900.
func checkBoot(t *testing.T, where string, b bootReport, want string) {
	t.Helper()
	if b.state != "running" && b.state != "degraded" {
		t.Errorf("%s: systemd is %q\n%s", where, b.state, b.raw)
		return
	}
	if p1 := b.procs["1"]; p1[1] != "systemd" || !strings.HasSuffix(b.exe, "/lib/systemd/systemd") {
		t.Errorf("%s: PID 1 is %q (%s), want the image's systemd", where, p1[1], b.exe)
	}
	for _, s := range []string{"cron.service", "dbus.service", "rsyslog.service", "systemd-journald.service", "systemd-logind.service"} {
		if _, ok := b.services[s]; !ok {
			t.Errorf("%s: %s is not running: %v", where, s, b.services)
		}
	}
	for u, pid := range b.services {
		p, ok := b.procs[pid]
		switch {
		case !ok:
			t.Errorf("%s: %s's main process %s is not in the list", where, u, pid)
		case want != "" && p[2] != want:
			t.Errorf("%s: %s (%s %s) has oom_score_adj %s, want %s", where, u, pid, p[1], p[2], want)
		case want == "" && p[2] == "900":
			t.Errorf("%s: the source's %s has the shim's score 900 already: the test proves nothing", where, u)
		}
	}
	for pid, p := range b.procs {
		if pid == b.self {
			continue
		}
		if want != "" && p[2] != want {
			t.Errorf("%s: process %s %s (parent %s) has oom_score_adj %s, want %s", where, pid, p[1], p[0], p[2], want)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", where, b.raw)
	}
}

// patchRepo pushes the set's images as repo:NAME-FORMAT and patches them;
// it returns each tag's result.
func patchRepo(t *testing.T, r *realRig, set *imagebuild.Set, repo string, refs ...string) map[string]realResult {
	t.Helper()
	var args []string
	for _, ref := range refs {
		tag := strings.ReplaceAll(ref, ":", "-")
		r.put(set, repo+":"+tag, ref)
		args = append(args, r.ref(repo+":"+tag))
	}
	code, res, stderr := r.imagepatch(append([]string{"apply"}, args...)...)
	if code != 0 || len(res) != len(refs) {
		t.Fatalf("apply: exit %d %+v\n%s", code, res, stderr)
	}
	out := map[string]realResult{}
	for _, x := range res {
		src, _ := name.NewTag(x.Source, r.nameOpts...)
		out[src.TagStr()] = x
	}
	return out
}

// TestE2ERealImagesPodman: the patched systemd image, pulled from the
// registry with its CA and credentials, boots under podman as the source
// does — plain `podman run` (podman's systemd mode as the source gets it)
// and `--systemd=always` — with systemd as PID 1 and every process and
// service at the shim's 900 (the source's at podman's own).
func TestE2ERealImagesPodman(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the images are linux/amd64; this machine cannot run them")
	}
	set := realImages(t)
	r := newRealRig(t, v3Secure)
	res := patchRepo(t, r, set, "ml/vm", "systemd:docker-gzip", "systemd:oci-zstd")
	p := newPodman(t, r)
	for _, tag := range []string{"systemd-docker-gzip", "systemd-oci-zstd"} {
		src, patched := r.ref("ml/vm:"+tag), res[tag].Destination
		p.pullImage(src)
		p.pullImage(patched)
		for _, tc := range []struct {
			name, image, want string
			args              []string
		}{
			{"source, podman run", src, "", nil},
			{"patched, podman run", patched, "900", nil},
			{"patched, podman run --systemd=always", patched, "900", []string{"--systemd=always"}},
		} {
			t.Run(tag+"/"+tc.name, func(t *testing.T) {
				name := fmt.Sprintf("ogreal-%d", time.Now().UnixNano())
				out, code := p.podman(append(append(append([]string{"run", "-d", "--name", name}, podmanLimits...), tc.args...), tc.image)...)
				defer p.podman("rm", "-f", "-t", "0", name)
				if code != 0 {
					t.Fatalf("podman run: exit %d\n%s", code, out)
				}
				out, code = p.podman("exec", name, "/bin/sh", "-c", bootScript)
				if code != 0 {
					logs, _ := p.podman("logs", name)
					state, _ := p.podman("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name)
					t.Fatalf("podman exec: exit %d\n%s\ncontainer: %s\nlogs:\n%s", code, out, state, logs)
				}
				checkBoot(t, tag+" "+tc.name, parseBoot(out), tc.want)
			})
		}
	}
}

// TestE2ERealImagesCommandAndArgs: for every combination of ENTRYPOINT and
// CMD an image has (the minimal Debian image's CMD ["bash"], an
// entrypoint alone, both, neither) and every way a pod runs it (nothing,
// args:, command:, both; podman run IMAGE ARGS…, --entrypoint), the
// patched image under podman does what the source does: the same output
// and exit code. args: runs through the shim (900).
func TestE2ERealImagesCommandAndArgs(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the images are linux/amd64; this machine cannot run them")
	}
	set := realImages(t)
	r := newRealRig(t, debianPlain)
	minimal, err := set.Image(imagebuild.Minimal + ":oci-gzip")
	if err != nil {
		t.Fatal(err)
	}
	variant := func(ep, cmd []string) v1.Image {
		cf, _ := minimal.ConfigFile()
		cf = cf.DeepCopy()
		cf.Config.Entrypoint, cf.Config.Cmd = ep, cmd
		img, err := mutate.ConfigFile(minimal, cf)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	images := []struct {
		tag     string
		ep, cmd []string
	}{
		{"cmd", nil, []string{"bash"}},
		{"entrypoint", []string{"/bin/echo", "ep"}, nil},
		{"both", []string{"/bin/echo", "ep"}, []string{"cmd"}},
		{"neither", nil, nil},
	}
	var refs []string
	for _, im := range images {
		r.putImage("ml/cmd:"+im.tag, variant(im.ep, im.cmd))
		refs = append(refs, r.ref("ml/cmd:"+im.tag))
	}
	code, res, stderr := r.imagepatch(append([]string{"apply"}, refs...)...)
	if code != 0 || len(res) != len(images) {
		t.Fatalf("apply: exit %d %+v\n%s", code, res, stderr)
	}
	patched := map[string]string{}
	for _, x := range res {
		src, _ := name.NewTag(x.Source, r.nameOpts...)
		patched[src.TagStr()] = x.Destination
	}
	p := newPodman(t, r)
	for _, ref := range refs {
		p.pullImage(ref)
	}
	for _, d := range patched {
		p.pullImage(d)
	}
	runs := []struct {
		name    string
		command []string // --entrypoint: a pod's command:
		args    []string // after the image: a pod's args:
	}{
		{"nothing", nil, nil},
		{"args", nil, []string{"/bin/echo", "args"}},
		{"command", []string{"/bin/echo", "command"}, nil},
		{"command and args", []string{"/bin/echo", "command"}, []string{"and", "args"}},
	}
	podmanRun := func(image string, command, args []string) (string, int) {
		a := append([]string{"run", "--rm"}, podmanLimits...)
		if command != nil {
			b, _ := json.Marshal(command)
			a = append(a, "--entrypoint", string(b))
		}
		return p.podman(append(append(a, image), args...)...)
	}
	for _, im := range images {
		for _, run := range runs {
			t.Run(im.tag+"/"+run.name, func(t *testing.T) {
				so, sc := podmanRun(r.ref("ml/cmd:"+im.tag), run.command, run.args)
				po, pc := podmanRun(patched[im.tag], run.command, run.args)
				if im.tag == "neither" && run.name == "nothing" {
					// The source has nothing to run: podman refuses it.
					// Its patch must not run something instead.
					if sc == 0 || pc == 0 {
						t.Errorf("an image with neither entrypoint nor cmd, run without a command: source exit %d %q, patched exit %d %q", sc, so, pc, po)
					}
					return
				}
				if sc != pc || so != po {
					t.Errorf("source: exit %d %q; patched: exit %d %q", sc, so, pc, po)
				}
			})
		}
	}
	// args: keeps the shim: the process runs at 900.
	for _, im := range images {
		out, code := podmanRun(patched[im.tag], nil, []string{"/bin/cat", "/proc/self/oom_score_adj"})
		if im.ep == nil && (code != 0 || strings.TrimSpace(out) != "900") {
			t.Errorf("%s: args: through the shim: exit %d %q, want 900", im.tag, code, out)
		}
	}
}

// TestE2ERealImagesRunc: the patched systemd image unpacked (the real
// tar, owners kept) as a runc bundle with what a runtime gives a systemd
// container (tmpfs /run and /tmp, a writable cgroup mount, container=oci)
// boots: PID 1 is the image's systemd, every service and process at 900;
// the source, unpacked the same way, at the runtime's own.
func TestE2ERealImagesRunc(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the images are linux/amd64; this machine cannot run them")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("runc is not installed (make deps): %v", err)
	}
	set := realImages(t)
	r := newRealRig(t, debianPlain)
	res := patchRepo(t, r, set, "ml/vm", "systemd:oci-zstd")
	for _, tc := range []struct{ name, ref, want string }{
		{"source", r.ref("ml/vm:systemd-oci-zstd"), ""},
		{"patched", res["systemd-oci-zstd"].Destination, "900"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := r.descriptor(tc.ref)
			img, err := d.Image()
			if err != nil {
				t.Fatal(err)
			}
			out := runcBoot(t, img)
			checkBoot(t, tc.name+" under runc", parseBoot(out), tc.want)
		})
	}
}

// runcBoot unpacks img into a bundle, runs it detached with runc, runs the
// boot script in it and returns what it printed.
func runcBoot(t *testing.T, img v1.Image) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ogrunc-")
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Base(dir)
	state := filepath.Join(dir, "state")
	t.Cleanup(func() {
		exec.Command("runc", "--root", state, "kill", id, "KILL").Run()
		time.Sleep(200 * time.Millisecond)
		exec.Command("runc", "--root", state, "delete", "--force", id).Run()
		os.RemoveAll(dir)
	})
	rootfs := filepath.Join(dir, "rootfs")
	os.MkdirAll(rootfs, 0o755)
	// The flattened filesystem (whiteouts applied), by GNU tar: owners,
	// modes, links and devices as the layers have them.
	tarCmd := exec.Command("tar", "-x", "--numeric-owner", "-p", "--xattrs", "--xattrs-include=*", "-C", rootfs)
	rc := mutate.Extract(img)
	defer rc.Close()
	tarCmd.Stdin = rc
	if out, err := tarCmd.CombinedOutput(); err != nil {
		t.Fatalf("unpack: %v\n%s", err, out)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	var spec map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	json.Unmarshal(b, &spec)
	cf, _ := img.ConfigFile()
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = append(slices.Clone(cf.Config.Entrypoint), cf.Config.Cmd...)
	proc["env"] = append(slices.Clone(cf.Config.Env), "container=oci")
	// podman's default capabilities, which its systemd containers have.
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT"}
	proc["capabilities"] = map[string]any{"bounding": caps, "effective": caps, "permitted": caps}
	spec["root"] = map[string]any{"path": "rootfs", "readonly": false}
	mounts := spec["mounts"].([]any)
	for _, m := range mounts {
		mm := m.(map[string]any)
		if mm["destination"] == "/sys/fs/cgroup" {
			mm["options"] = []string{"nosuid", "noexec", "nodev", "relatime", "rw"}
		}
	}
	for _, d := range []string{"/run", "/run/lock", "/tmp"} {
		mounts = append(mounts, map[string]any{"destination": d, "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}})
	}
	spec["mounts"] = mounts
	b, _ = json.MarshalIndent(spec, "", "  ")
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)

	logf, _ := os.Create(filepath.Join(dir, "console.log"))
	defer logf.Close()
	run := exec.Command("runc", "--root", state, "run", "--detach", "--bundle", dir, id)
	run.Stdout, run.Stderr = logf, logf
	if err := run.Run(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "console.log"))
		t.Fatalf("runc run: %v\n%s", err, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "runc", "--root", state, "exec", id, "/bin/sh", "-c", bootScript).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "console.log"))
		t.Fatalf("runc exec: %v\n%s\nconsole:\n%s", err, out, log)
	}
	return string(out)
}

// TestE2ERealImagesSigned: given a key, imagepatch signs what it pushes
// (cosign-compatible, in the registry as cosign puts them), so that
// `cosign verify --key` of the real cosign verifies every result — and
// nothing else is written.
func TestE2ERealImagesSigned(t *testing.T) {
	set := realImages(t)
	r := newRealRig(t, v3Secure)
	const repo = "ml/signed"
	refs := []string{"systemd:oci-zstd", "systemd:docker-gzip", "index:oci-gzip"}
	for _, ref := range refs {
		r.put(set, repo+":"+strings.ReplaceAll(ref, ":", "-"), ref)
	}
	r.cosign("version") // makes the key pair
	key := filepath.Join(r.dir, "cosign", "cosign.key")
	r.env = append(r.env, "COSIGN_PASSWORD=e2e")
	r.reg.Reset()
	code, res, stderr := r.imagepatch("apply", "--repo", r.ref(repo), "--sign-key", key)
	if code != 0 || realActions(res)["push"] != len(refs) {
		t.Fatalf("apply --sign-key: exit %d %+v\n%s", code, res, stderr)
	}
	for _, x := range res {
		if err := r.verify(r.ref(repo)+"@"+x.Digest, filepath.Join(r.dir, "cosign", "cosign.pub")); err != nil {
			t.Errorf("%s: %v", x.Destination, err)
		}
	}
}

// TestE2ERealImagesSignedBundle: with --signature-format bundle, each result
// gets one Sigstore bundle as an OCI referrer (distribution v3 has no
// referrers API here: go-containerregistry keeps the fallback tag), which
// the real cosign's new-bundle-format path verifies; a re-run adds none.
func TestE2ERealImagesSignedBundle(t *testing.T) {
	set := realImages(t)
	r := newRealRig(t, v3Secure)
	const repo = "ml/bundled"
	refs := []string{"systemd:oci-zstd", "index:oci-gzip"}
	for _, ref := range refs {
		r.put(set, repo+":"+strings.ReplaceAll(ref, ":", "-"), ref)
	}
	r.cosign("version") // makes the key pair
	key, pub := filepath.Join(r.dir, "cosign", "cosign.key"), filepath.Join(r.dir, "cosign", "cosign.pub")
	r.env = append(r.env, "COSIGN_PASSWORD=e2e")
	for run := range 2 {
		code, all, stderr := r.imagepatch("apply", "--repo", r.ref(repo), "--sign-key", key, "--signature-format", "bundle")
		var res []realResult // the second run also lists the results, as already patched
		for _, x := range all {
			if x.Action != "skipped" {
				res = append(res, x)
			}
		}
		if code != 0 || len(res) != len(refs) {
			t.Fatalf("run %d: apply --signature-format bundle: exit %d %+v\n%s", run, code, all, stderr)
		}
		for _, x := range res {
			if !strings.Contains(x.Signature, "@sha256:") {
				t.Errorf("%s: signature %q, want the referrer's digest", x.Destination, x.Signature)
			}
			if err := r.verify(r.ref(repo)+"@"+x.Digest, pub, "--new-bundle-format"); err != nil {
				t.Errorf("%s: %v", x.Destination, err)
			}
			d, err := name.NewDigest(r.ref(repo)+"@"+x.Digest, r.nameOpts...)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Referrers(d, r.reg.RemoteOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			if im, _ := idx.IndexManifest(); len(im.Manifests) != 1 {
				t.Errorf("run %d: %s has %d referrers, want its one bundle: %+v", run, x.Destination, len(im.Manifests), im.Manifests)
			}
		}
	}
}
