// Package imagebuild builds the real images the image tests patch, the way
// users build them, once: Debian bookworm root filesystems from Debian's
// packages (debootstrap --variant=minbase, merged /usr), made into images by
// buildah from Containerfiles (FROM scratch + ADD rootfs.tar, as Debian's
// own images are; then FROM it + RUN apt-get install systemd …), pushed by
// buildah and skopeo in Docker and OCI formats, gzip and zstd, single and
// as multi-arch lists (an arm64 entry that reuses the amd64 layers, a
// Windows entry with a layer of its own). What they pushed is kept,
// byte for byte, as an OCI layout under build/images/KEY, KEY a hash of
// the recipe, so that a second run reuses it.
package imagebuild

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/testbin"
)

// The recipe. Any change to it is a new KEY: a new build.
const (
	Suite  = "bookworm"
	Mirror = "http://deb.debian.org/debian"
	// recipeVersion changes the KEY when the steps below change.
	recipeVersion = "3"
)

// SystemdPackages are what the systemd image installs over the minimal
// one: systemd as PID 1 and a few services it starts (dbus, cron, rsyslog;
// systemd-journald and systemd-logind are systemd's own).
var SystemdPackages = []string{"systemd", "systemd-sysv", "dbus", "cron", "rsyslog"}

// The Containerfiles, as users write them.
const (
	minimalContainerfile = `FROM scratch
ADD rootfs.tar /
CMD ["bash"]
`
	systemdContainerfile = `FROM localhost/oomguard-e2e/minimal
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends %s \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
`
	windowsContainerfile = `FROM scratch
COPY Files/ /Files/
`
)

// The images in the set, by their name in the layout.
const (
	// Minimal is debootstrap's minbase as Debian's own image is made:
	// one layer, CMD ["bash"]. Minimal+":"+a format.
	Minimal = "minimal"
	// Systemd is Minimal with SystemdPackages installed (a second layer),
	// CMD ["/sbin/init"], STOPSIGNAL SIGRTMIN+3. Systemd+":"+a format.
	Systemd = "systemd"
	// Index is Systemd for linux/amd64 and linux/arm64 (the same layers,
	// an arm64 config: never run) as a Docker manifest list
	// (Index+":docker-gzip"), or as an OCI index with a windows/amd64
	// entry of one small layer of its own (Index+":oci-gzip",
	// Index+":oci-zstd").
	Index = "index"
)

// Formats are the formats every image comes in: the manifest's and the
// layers' compression.
var Formats = []string{"docker-gzip", "oci-gzip", "oci-zstd"}

// Set is the built images, in an OCI layout.
type Set struct {
	Dir    string // build/images/KEY
	layout layout.Path
}

// Available says why the images cannot be built here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("building images with debootstrap and buildah needs root")
	}
	for _, b := range []string{"debootstrap", "buildah", "skopeo", "unshare", "runc", "tar"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("%s is not installed (make deps)", b)
		}
	}
	if _, err := os.Stat(registrytest.Binary); err != nil {
		return fmt.Errorf("%s is missing (make deps)", registrytest.Binary)
	}
	return nil
}

// Key is the hash of the recipe the images are built from.
func Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%q\n%s\n%s\n%s\n%q\n", recipeVersion, Suite, Mirror, SystemdPackages,
		minimalContainerfile, systemdContainerfile, windowsContainerfile, Formats)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Build returns the set, building it first when build/images holds none
// for this recipe (a few minutes: debootstrap, apt, compression), and
// says what it does through logf. Builds of other recipes are removed.
// Concurrent callers (test packages run at once) wait for one build.
func Build(logf func(format string, args ...any)) (*Set, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	root, err := testbin.RepoRoot()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(root, "build", "images")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(base, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	key := Key()
	dir := filepath.Join(base, key)
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		logf("imagebuild: reusing %s", dir)
		return open(dir)
	}
	start := time.Now()
	logf("imagebuild: building %s (debootstrap %s, buildah; a few minutes, once)", dir, Suite)
	work := dir + ".tmp"
	if err := os.RemoveAll(work); err != nil {
		return nil, err
	}
	if err := build(work, logf); err != nil {
		return nil, fmt.Errorf("building the test images in %s: %w", work, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(filepath.Join(work, "layout"), filepath.Join(dir, "layout")); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(work); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "done"), []byte(time.Now().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return nil, err
	}
	// Other recipes' builds are of no use any more.
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if e.Name() != key && e.Name() != ".lock" {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
	logf("imagebuild: built in %s", time.Since(start).Round(time.Second))
	return open(dir)
}

func open(dir string) (*Set, error) {
	p, err := layout.FromPath(filepath.Join(dir, "layout"))
	if err != nil {
		return nil, err
	}
	return &Set{Dir: dir, layout: p}, nil
}

// build runs the recipe in work: work/layout is the result.
func build(work string, logf func(string, ...any)) error {
	for _, d := range []string{"rootfs", "ctx/minimal", "ctx/systemd", "ctx/windows/Files", "storage", "run", "registry/gzip", "registry/zstd"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			return err
		}
	}
	step := func(what string, f func() error) error {
		t := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		logf("imagebuild: %s: %s", what, time.Since(t).Round(100*time.Millisecond))
		return nil
	}
	rootfs := filepath.Join(work, "rootfs")

	// The root filesystem, from Debian's packages. In a mount namespace of
	// its own: debootstrap's mounts of /proc and /sys go with it.
	if err := step("debootstrap --variant=minbase "+Suite, func() error {
		return run("unshare", "--mount", "--propagation", "private", "debootstrap", "--variant=minbase", "--merged-usr", Suite, rootfs, Mirror)
	}); err != nil {
		return err
	}
	// What Debian's image builder leaves out: the downloaded packages and
	// lists, the device nodes (the runtime makes them), the host's name
	// and resolver.
	for _, glob := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "dev/*", "etc/hostname", "etc/resolv.conf"} {
		matches, _ := filepath.Glob(filepath.Join(rootfs, glob))
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	if err := step("tar the root filesystem", func() error {
		return run("tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", rootfs, "-cf", filepath.Join(work, "ctx/minimal/rootfs.tar"), ".")
	}); err != nil {
		return err
	}
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	files := map[string]string{
		"ctx/minimal/Containerfile":     minimalContainerfile,
		"ctx/systemd/Containerfile":     fmt.Sprintf(systemdContainerfile, strings.Join(SystemdPackages, " ")),
		"ctx/windows/Containerfile":     windowsContainerfile,
		"ctx/windows/Files/License.txt": "A Windows image's layer holds Files/ and Hives/; this one is never run.\n",
	}
	for p, s := range files {
		if err := os.WriteFile(filepath.Join(work, p), []byte(s), 0o644); err != nil {
			return err
		}
	}

	// buildah with storage of its own, and runc (crun refuses this
	// host's hybrid cgroups).
	store := []string{"--root", filepath.Join(work, "storage"), "--runroot", filepath.Join(work, "run"), "--storage-driver", "vfs"}
	buildah := func(args ...string) error { return isolated("buildah", append(slices.Clone(store), args...)...) }
	defer func() {
		buildah("rm", "--all")
		buildah("rmi", "--all", "--force")
	}()
	const img = "localhost/oomguard-e2e/"
	bud := []string{"bud", "--runtime", "runc", "--network", "host", "--format", "docker"}
	if err := step("buildah bud minimal", func() error {
		return buildah(append(bud, "-t", img+"minimal", filepath.Join(work, "ctx/minimal"))...)
	}); err != nil {
		return err
	}
	if err := step("buildah bud systemd (apt-get install "+strings.Join(SystemdPackages, " ")+")", func() error {
		return buildah(append(bud, "-t", img+"systemd", filepath.Join(work, "ctx/systemd"))...)
	}); err != nil {
		return err
	}
	if err := step("buildah bud windows", func() error {
		return buildah("bud", "--platform", "windows/amd64", "--format", "oci", "-t", img+"windows", filepath.Join(work, "ctx/windows"))
	}); err != nil {
		return err
	}
	// The arm64 entry: the same layers, an arm64 config.
	if err := step("arm64 entry", func() error {
		out, err := exec.Command("buildah", append(slices.Clone(store), "from", "--pull=never", img+"systemd")...).Output()
		if err != nil {
			return fmt.Errorf("buildah from: %w", err)
		}
		ctr := strings.TrimSpace(string(out))
		if err := buildah("config", "--arch", "arm64", ctr); err != nil {
			return err
		}
		return buildah("commit", "--format", "docker", ctr, img+"systemd-arm64")
	}); err != nil {
		return err
	}

	// Pushed by buildah to a registry of the build's own, in each format.
	// zstd into a second one: skopeo copies a list's layers as they are
	// into a registry that has them already, whatever compression it is
	// asked for.
	regs := map[string]*registrytest.Registry{}
	for _, c := range []string{"gzip", "zstd"} {
		r, err := registrytest.Start(filepath.Join(work, "registry", c))
		if err != nil {
			return err
		}
		defer r.Stop()
		regs[c] = r
	}
	host := func(ref string) string {
		if strings.HasSuffix(ref, "zstd") {
			return regs["zstd"].Direct
		}
		return regs["gzip"].Direct
	}
	dst := func(ref string) string { return "docker://" + host(ref) + "/e2e/" + ref }
	push := func(src, ref, format, compression string) error {
		return step("buildah push "+ref, func() error {
			return buildah("push", "--tls-verify=false", "--format", format, "--compression-format", compression, src, dst(ref))
		})
	}
	list := func(listName, ref, format string, entries ...[]string) error {
		return step("buildah manifest push "+ref, func() error {
			if err := buildah("manifest", "create", listName); err != nil {
				return err
			}
			for _, e := range entries {
				if err := buildah(append([]string{"manifest", "add"}, append(e[1:], listName, "containers-storage:"+e[0])...)...); err != nil {
					return err
				}
			}
			return buildah("manifest", "push", "--all", "--tls-verify=false", "--format", format, listName, dst(ref))
		})
	}
	for _, f := range []struct{ name, format, compression string }{{"docker-gzip", "v2s2", "gzip"}, {"oci-gzip", "oci", "gzip"}, {"oci-zstd", "oci", "zstd"}} {
		for _, name := range []string{Minimal, Systemd} {
			if err := push(img+name, name+":"+f.name, f.format, f.compression); err != nil {
				return err
			}
		}
	}
	if err := list("list-docker", Index+":docker-gzip", "v2s2", []string{img + "systemd"}, []string{img + "systemd-arm64", "--arch", "arm64"}); err != nil {
		return err
	}
	if err := list("list-oci", Index+":oci-gzip", "oci", []string{img + "systemd"}, []string{img + "systemd-arm64", "--arch", "arm64"},
		[]string{img + "windows", "--os", "windows", "--arch", "amd64"}); err != nil {
		return err
	}
	// The zstd index as skopeo copies a list into another compression.
	if err := step("skopeo copy --all "+Index+":oci-zstd", func() error {
		return isolated("skopeo", "copy", "--all", "--src-tls-verify=false", "--dest-tls-verify=false", "--format", "oci",
			"--dest-compress-format", "zstd", dst(Index+":oci-gzip"), dst(Index+":oci-zstd"))
	}); err != nil {
		return err
	}

	// Kept as they were pushed, byte for byte.
	return step("write the OCI layout", func() error {
		p, err := layout.Write(filepath.Join(work, "layout"), empty.Index)
		if err != nil {
			return err
		}
		for _, ref := range Refs() {
			r, err := name.ParseReference(host(ref)+"/e2e/"+ref, name.Insecure)
			if err != nil {
				return err
			}
			desc, err := remote.Get(r)
			if err != nil {
				return err
			}
			ann := layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})
			if desc.MediaType.IsIndex() {
				var idx v1.ImageIndex
				if idx, err = desc.ImageIndex(); err == nil {
					err = p.AppendIndex(idx, ann)
				}
			} else {
				var im v1.Image
				if im, err = desc.Image(); err == nil {
					err = p.AppendImage(im, ann)
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", ref, err)
			}
		}
		return nil
	})
}

// Refs are every image and index of the set: NAME:FORMAT.
func Refs() []string {
	var refs []string
	for _, n := range []string{Minimal, Systemd} {
		for _, f := range Formats {
			refs = append(refs, n+":"+f)
		}
	}
	for _, f := range Formats {
		refs = append(refs, Index+":"+f)
	}
	return refs
}

// Get is the image or index ref (NAME:FORMAT) of the set.
func (s *Set) Get(ref string) (v1.Descriptor, error) {
	idx, err := s.layout.ImageIndex()
	if err != nil {
		return v1.Descriptor{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	for _, d := range im.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == ref {
			return d, nil
		}
	}
	return v1.Descriptor{}, fmt.Errorf("%s is not in %s", ref, s.Dir)
}

// Image is the image ref (NAME:FORMAT) of the set.
func (s *Set) Image(ref string) (v1.Image, error) {
	d, err := s.Get(ref)
	if err != nil {
		return nil, err
	}
	return s.layout.Image(d.Digest)
}

// Index is the index ref (Index:FORMAT) of the set.
func (s *Set) Index(ref string) (v1.ImageIndex, error) {
	d, err := s.Get(ref)
	if err != nil {
		return nil, err
	}
	root, err := s.layout.ImageIndex()
	if err != nil {
		return nil, err
	}
	return root.ImageIndex(d.Digest)
}

// isolated runs a command of buildah or skopeo with a blob info cache of
// its own, empty: containers/image remembers every layer's compressed forms
// in /var/lib/containers/cache and reuses them wherever it can, so a push
// asked for zstd would send the gzip layers it pushed before (and a Docker
// manifest the zstd ones, which it refuses). Each push compresses afresh,
// and the host's cache is left as it was.
func isolated(name string, args ...string) error {
	const cache = "/var/lib/containers/cache"
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return err
	}
	return run("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", `mount -t tmpfs tmpfs ` + cache + ` && exec "$@"`, "sh", name}, args...)...)
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out))
	}
	return nil
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return append([]byte("…"), b[len(b)-4000:]...)
	}
	return b
}
