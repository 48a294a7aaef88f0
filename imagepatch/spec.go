// Package imagepatch layers a small patch — files and config edits — onto
// existing tagged images in a registry, under new tags. It reads manifests
// and configs only, uploads the patch layer once per repository, never
// overwrites a tag with other content, and records the image each result was
// made from so that a later patch starts from that base instead of stacking.
package imagepatch

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/oomguard/oomguard/internal/safeio"
	"github.com/oomguard/oomguard/internal/stricttoml"
)

// Spec is one patch, read from TOML.
type Spec struct {
	Name    string `toml:"name"`
	Version string `toml:"version"`
	Files   []File `toml:"file"`
	Config  Edits  `toml:"config"`
	// Unpatchable says what becomes of index entries the patch has no files
	// for (other architectures, attestations): "drop" (default) or "keep".
	// An entry for another operating system (windows) is always kept: the
	// patch is for linux, and its nodes must still find their image.
	Unpatchable string `toml:"unpatchable"`

	dir string // where relative sources are found
}

// File is one file the patch layer adds.
type File struct {
	Path string `toml:"path"`
	Mode int64  `toml:"mode"`
	// One of: Source (a host file), Sources (one per architecture),
	// Content, Link (a symbolic link to this target).
	Source  string            `toml:"source"`
	Sources map[string]string `toml:"sources"`
	Content *string           `toml:"content"`
	Link    string            `toml:"link"`

	data map[string][]byte // by architecture; "" for every architecture
}

// Edits change the image config.
type Edits struct {
	// EntrypointPrefix runs first: the new entrypoint is the prefix, then the
	// image's own entrypoint; the image's cmd stays its cmd.
	EntrypointPrefix []string `toml:"entrypoint_prefix"`
	// InitEntrypointPrefix is used instead of EntrypointPrefix for an image
	// whose own command (entrypoint and cmd, as podman puts them together)
	// is an init as podman's systemd mode sees it: /sbin/init,
	// /usr/sbin/init, /usr/local/sbin/init or a path whose base name is
	// systemd. Its first element must be such a path too (the shim under
	// the name systemd), so that podman still runs the patched image in
	// systemd mode.
	InitEntrypointPrefix []string `toml:"init_entrypoint_prefix"`
	// DefaultCommand becomes the cmd of an image with neither entrypoint
	// nor cmd (a command given at run time replaces it, as it would have
	// replaced the image's own).
	DefaultCommand []string          `toml:"default_command"`
	Env            map[string]string `toml:"env"`
	Labels         map[string]string `toml:"labels"`
}

// Labels imagepatch records in every image it makes.
const (
	LabelName       = "io.oomguard.patch.name"
	LabelVersion    = "io.oomguard.patch.version"
	LabelBaseDigest = "io.oomguard.patch.base.digest"
	LabelBaseName   = "io.oomguard.patch.base.name"
	// LabelBaseIndex, on each patched entry of an index, is the index's
	// base: a Docker manifest list has no annotations to record it in.
	LabelBaseIndex = "io.oomguard.patch.base.index"
)

// The OCI image spec's lineage annotations, which every OCI manifest and
// index imagepatch makes also carries (Docker's schemas have no
// annotations: their labels say it).
const (
	AnnotationBaseDigest = "org.opencontainers.image.base.digest"
	AnnotationBaseName   = "org.opencontainers.image.base.name"
)

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*$`)
	versionRE = regexp.MustCompile(`^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$`)
)

// LoadSpec reads a spec file; relative sources are relative to its directory.
func LoadSpec(p string) (*Spec, error) {
	b, err := safeio.ReadFile(p, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("read patch spec: %w", err)
	}
	s, err := ParseSpec(b, filepath.Dir(p))
	if err != nil {
		return nil, fmt.Errorf("patch spec %s: %w", p, err)
	}
	return s, nil
}

// ParseSpec decodes and validates a spec and reads its files.
func ParseSpec(data []byte, dir string) (*Spec, error) {
	var s Spec
	if err := stricttoml.Decode(data, &s); err != nil {
		return nil, err
	}
	s.dir = dir
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Spec) validate() error {
	var errs []error
	add := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if !nameRE.MatchString(s.Name) {
		add("name %q: want lower-case letters, digits and . _ - (it goes into tags)", s.Name)
	}
	if !versionRE.MatchString(s.Version) {
		add("version %q: want letters, digits and . _ - (it goes into tags)", s.Version)
	}
	switch s.Unpatchable {
	case "":
		s.Unpatchable = "drop"
	case "drop", "keep":
	default:
		add("unpatchable %q: want drop or keep", s.Unpatchable)
	}
	if len(s.Files) == 0 && len(s.Config.EntrypointPrefix) == 0 && len(s.Config.Env) == 0 && len(s.Config.Labels) == 0 {
		add("the patch changes nothing: add a [[file]] or a [config] edit")
	}
	seen := map[string]bool{}
	for i := range s.Files {
		f := &s.Files[i]
		where := fmt.Sprintf("file #%d %q", i+1, f.Path)
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			add("%s: path must be absolute and clean", where)
		}
		if hasControl(f.Path) {
			add("%s: path has a control character", where)
		}
		if seen[f.Path] {
			add("%s: listed twice", where)
		}
		seen[f.Path] = true
		if f.Mode == 0 {
			f.Mode = 0o644
		}
		if f.Mode < 0 || f.Mode > 0o7777 {
			add("%s: mode %o out of range", where, f.Mode)
		}
		n := 0
		if f.Source != "" {
			n++
		}
		if len(f.Sources) > 0 {
			n++
		}
		if f.Content != nil {
			n++
		}
		if f.Link != "" {
			n++
			if hasControl(f.Link) {
				add("%s: link has a control character", where)
			}
		}
		if n != 1 {
			add("%s: give exactly one of source, sources, content, link", where)
			continue
		}
		if err := f.load(s.dir); err != nil {
			add("%s: %v", where, err)
		}
	}
	for _, f := range s.Files {
		for d := path.Dir(f.Path); d != "/" && d != "."; d = path.Dir(d) {
			if seen[d] {
				add("file %q: %s is a file of the patch, not a directory", f.Path, d)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Config.Env)) {
		if k == "" || strings.ContainsRune(k, '=') || hasControl(k) {
			add("config.env key %q: want a name without '=' or control characters", k)
		} else if hasControl(s.Config.Env[k]) {
			add("config.env %s: the value has a control character", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Config.Labels)) {
		if strings.HasPrefix(k, "io.oomguard.patch.") {
			add("config.labels %q: the io.oomguard.patch. labels are imagepatch's own", k)
		}
		if k == "" || hasControl(k) {
			add("config.labels key %q: want a name without control characters", k)
		}
	}
	for _, a := range slices.Concat(s.Config.EntrypointPrefix, s.Config.InitEntrypointPrefix, s.Config.DefaultCommand) {
		if strings.ContainsRune(a, 0) {
			add("config: argument %q has a NUL", a)
		}
	}
	if ip := s.Config.InitEntrypointPrefix; len(ip) > 0 {
		if len(s.Config.EntrypointPrefix) == 0 {
			add("config.init_entrypoint_prefix needs an entrypoint_prefix")
		}
		if !PodmanSystemd(ip[:1]) {
			add("config.init_entrypoint_prefix %q: its first element must be a path podman's systemd mode knows (one whose base name is systemd)", ip[0])
		}
	}
	return errors.Join(errs...)
}

// maxSource bounds a source file: a patch is small.
const maxSource = 64 << 20

func (f *File) load(dir string) error {
	f.data = map[string][]byte{}
	read := func(p string) ([]byte, error) {
		if e, ok := embedded[p]; ok {
			return e, nil
		}
		if !filepath.IsAbs(p) {
			// A relative source is the spec's own: it stays in its directory.
			if !filepath.IsLocal(p) {
				return nil, fmt.Errorf("source %q is outside the spec's directory: give an absolute path if that is meant", p)
			}
			p = filepath.Join(dir, p)
		}
		// A source that is a link could put any host file (/etc/shadow)
		// into an image under an innocent name: copy the file itself.
		if st, err := os.Lstat(p); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("source %s is a symlink: point source at the file it links to", p)
		}
		return safeio.ReadFile(p, maxSource)
	}
	switch {
	case f.Link != "":
		f.data[""] = nil
	case f.Content != nil:
		f.data[""] = []byte(*f.Content)
	case f.Source != "":
		b, err := read(f.Source)
		if err != nil {
			return err
		}
		f.data[""] = b
	default:
		for arch, src := range f.Sources {
			b, err := read(src)
			if err != nil {
				return fmt.Errorf("source for %s: %w", arch, err)
			}
			f.data[arch] = b
		}
	}
	return nil
}

// Architectures lists the architectures the spec has files for; nil means any.
func (s *Spec) Architectures() []string {
	var out []string
	for _, f := range s.Files {
		if _, any := f.data[""]; any {
			continue
		}
		for a := range f.data {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.Sort(out)
	// An architecture must have every per-architecture file.
	var full []string
	for _, a := range out {
		ok := true
		for _, f := range s.Files {
			if _, any := f.data[""]; any {
				continue
			}
			if _, has := f.data[a]; !has {
				ok = false
			}
		}
		if ok {
			full = append(full, a)
		}
	}
	if out == nil {
		return nil
	}
	return full
}

// Supports reports whether the spec can patch an image of arch.
func (s *Spec) Supports(arch string) bool {
	archs := s.Architectures()
	return archs == nil || slices.Contains(archs, arch)
}

// SupportsPlatform says why the spec cannot patch an image of plat, or ""
// when it can: a patch layer is a linux layer (a windows one has another
// form), for the architectures the spec has files for, and for no
// operating system features it does not know.
func (s *Spec) SupportsPlatform(plat *v1.Platform) string {
	switch {
	case plat == nil:
		return "no platform"
	case plat.OS != "linux":
		return fmt.Sprintf("the patch is for linux, not %s", cmp.Or(plat.OS, `""`))
	case len(plat.OSFeatures) > 0:
		return fmt.Sprintf("the patch knows no os.features (%s)", strings.Join(plat.OSFeatures, ", "))
	case !s.Supports(plat.Architecture):
		return fmt.Sprintf("the patch has files for %s only", strings.Join(s.Architectures(), ", "))
	}
	return ""
}

// podmanInits are the commands podman (4.x, pkg/specgen/generate)
// runs in systemd mode, besides any whose base name is systemd.
var podmanInits = []string{"/sbin/init", "/usr/sbin/init", "/usr/local/sbin/init"}

// PodmanSystemd says whether podman turns on its systemd mode for a
// container whose command (entrypoint, then cmd) is cmd: its first element
// (after a leading /bin/sh -c) is /sbin/init, /usr/sbin/init,
// /usr/local/sbin/init, or has the base name systemd.
func PodmanSystemd(cmd []string) bool {
	if len(cmd) > 2 && cmd[0] == "/bin/sh" && cmd[1] == "-c" {
		cmd = cmd[2:]
	}
	if len(cmd) == 0 {
		return false
	}
	return slices.Contains(podmanInits, cmd[0]) || filepath.Base(cmd[0]) == "systemd"
}

//go:embed shim/oomguard-init-linux-amd64
var shimAMD64 []byte

//go:embed shim/oomguard-init-linux-arm64
var shimARM64 []byte

// embedded sources a spec can name with "embedded:".
var embedded = map[string][]byte{
	"embedded:oomguard-init-linux-amd64": shimAMD64,
	"embedded:oomguard-init-linux-arm64": shimARM64,
}

//go:embed shim.toml
var shimSpecTOML []byte

// ShimSpec is the built-in patch: oomguard-init in front of the image's
// entrypoint, for amd64 and arm64.
func ShimSpec() *Spec {
	s, err := ParseSpec(shimSpecTOML, "")
	if err != nil {
		panic("built-in shim spec: " + err.Error())
	}
	return s
}

// ShimSpecTOML is the built-in spec's text, a starting point for others.
func ShimSpecTOML() []byte { return bytes.Clone(shimSpecTOML) }

func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}
