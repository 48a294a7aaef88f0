package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/changes"
)

// nriPluginID is containerd's NRI plugin; a version-1 configuration on
// containerd 1.7 names plugins by their short ID.
const (
	nriPluginID      = "io.containerd.nri.v1.nri"
	nriPluginShortID = "nri"
)

// containerd is containerd 1.7 and 2.x: the main file
// /etc/containerd/config.toml, its imports in containerd's order, each
// version's plugin IDs. newVersion is a new main file's version;
// failClosed turns on NRI's default validator (containerd 2.2 and later).
type containerd struct {
	newVersion int
	failClosed bool
}

func (containerd) name() string   { return "containerd" }
func (containerd) unit() string   { return "containerd.service" }
func (containerd) comm() string   { return "containerd" }
func (containerd) dir() string    { return "/etc/containerd" }
func (containerd) dropIn() string { return ContainerdDropIn }

// k3s and RKE2 write containerd's configuration at every start, from a
// template beside it when there is one.
var generatedContainerd = []string{"/var/lib/rancher/k3s/agent/etc/containerd", "/var/lib/rancher/rke2/agent/etc/containerd"}

// refuse refuses a node whose containerd configuration its distribution
// regenerates, saying what to add where.
func (containerd) refuse(w *changes.Set, cfg *config.Config) error {
	for _, d := range generatedContainerd {
		if !w.Exists(d + "/config.toml") {
			continue
		}
		return fmt.Errorf("%s/config.toml is generated at every start of k3s or RKE2, which runs its own containerd: a drop-in in /etc/containerd would never be read. "+
			"Copy it to %s/config.toml.tmpl (config-v3.toml.tmpl for containerd 2), append this, and restart k3s or rke2-agent:\n%s",
			d, d, nriSection(cfg, nriPluginID))
	}
	return nil
}

// containerdDropInText is the drop-in in the main file's version: containerd
// 1.7 refuses files of two versions, and reads a version-1 file's plugins by
// their short ID, where 2.x migrates a full one.
func containerdDropInText(cfg *config.Config, version int, failClosed bool) string {
	s := fmt.Sprintf("# Written by oomguard-nri install: enables NRI and oomguard's plugin.\nversion = %d\n\n%s", version, nriSection(cfg, nriPluginID))
	if failClosed {
		s += fmt.Sprintf(`  # Fail closed: a container whose pod requires oomguard (annotation
  # required-plugins.noderesource.dev) is not created while it is away.
  [plugins.%q.default_validator]
    enable = true
`, nriPluginID)
	}
	if version == 1 {
		s += "\n# containerd 1.7 reads a version-1 file's plugins by their short ID.\n" + nriSection(cfg, nriPluginShortID)
	}
	return s
}

func nriSection(cfg *config.Config, id string) string {
	return fmt.Sprintf(`[plugins.%q]
  disable = false
  disable_connections = false
  plugin_config_path = %q
  plugin_path = %q
  socket_path = %q
`, id, PluginConfDir, PluginDir, cfg.NRI.Socket)
}

var bom = []byte("\xef\xbb\xbf")

// containerdFile is one file of containerd's configuration, read as
// containerd reads it: containerd 2.x decodes with pelletier/go-toml v2,
// 1.7 with its v1, which skips a UTF-8 BOM first.
type containerdFile struct {
	path string // on the node
	raw  []byte // as on disk
	doc  map[string]any
}

func readContainerdFile(w *changes.Set, p string) (*containerdFile, error) {
	raw, err := w.ReadFile(p, changes.MaxFile)
	if err != nil {
		return nil, err
	}
	f := &containerdFile{path: p, raw: raw}
	if err := toml.Unmarshal(bytes.TrimPrefix(raw, bom), &f.doc); err != nil {
		return nil, fmt.Errorf("%s is not TOML containerd can read (%v): fix it first", p, err)
	}
	return f, nil
}

// version is the file's config version as containerd takes it: none is 1.
func (f *containerdFile) version() int {
	if v, ok := f.doc["version"].(int64); ok && v > 0 {
		return int(v)
	}
	return 1
}

func (f *containerdFile) imports() []string {
	var out []string
	if list, ok := f.doc["imports"].([]any); ok {
		for _, v := range list {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// nri is the file's NRI plugin section, under the names containerd reads
// for the file's version.
func (f *containerdFile) nri() (map[string]any, bool) {
	plugins, _ := f.doc["plugins"].(map[string]any)
	for _, id := range []string{nriPluginID, nriPluginShortID} {
		if id == nriPluginShortID && f.version() != 1 {
			break
		}
		if s, ok := plugins[id].(map[string]any); ok {
			return s, true
		}
	}
	return nil, false
}

// resolveImports is containerd's: relative to the importing file's
// directory, globs expanded on the node's filesystem, each glob's matches
// sorted. extra is a file that will exist (oomguard's drop-in): a glob that
// matches it lists it where containerd will.
func resolveImports(w *changes.Set, parent string, imports []string, extra string) []string {
	var out []string
	for _, p := range imports {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(parent), p)
		}
		if !strings.Contains(p, "*") {
			out = append(out, p)
			continue
		}
		var matches []string
		dir, pattern := filepath.Split(p)
		if h, err := w.Host(dir); err == nil {
			ents, _ := os.ReadDir(h)
			for _, e := range ents {
				if ok, _ := filepath.Match(pattern, e.Name()); ok {
					matches = append(matches, filepath.Join(dir, e.Name()))
				}
			}
		}
		if ok, _ := filepath.Match(p, extra); ok && !slices.Contains(matches, extra) {
			matches = append(matches, extra)
		}
		slices.Sort(matches)
		out = append(out, matches...)
	}
	return out
}

// loadOrder is the files containerd loads, in its order: the main file,
// then each file's imports, each file once. extra is a file that will
// exist (oomguard's drop-in), placed where containerd will find it.
func loadOrder(w *changes.Set, main *containerdFile, extra string) ([]*containerdFile, error) {
	files := []*containerdFile{main}
	loaded := map[string]bool{main.path: true}
	pending := resolveImports(w, main.path, main.imports(), extra)
	for len(pending) > 0 {
		p := pending[0]
		pending = pending[1:]
		if loaded[p] {
			continue
		}
		loaded[p] = true
		if p == extra && !w.Exists(p) {
			files = append(files, &containerdFile{path: p})
			continue
		}
		f, err := readContainerdFile(w, p)
		if errors.Is(err, os.ErrNotExist) {
			continue // containerd itself fails on a missing file it was told to import
		}
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		pending = append(pending, resolveImports(w, p, f.imports(), extra)...)
	}
	return files, nil
}

// enable writes the NRI drop-in where containerd will read it and, when
// the main file imports nothing, adds the import to it (after a backup,
// keeping its mode, owner, line endings and byte order mark). It refuses,
// changing nothing, what it cannot do safely: a configuration containerd
// would not read, a file reached through a link --root does not show, a
// file read after oomguard's that turns NRI off again.
func (c containerd) enable(w *changes.Set, cfg *config.Config) error {
	if err := linkCheck(w, ContainerdConfig, "containerd's configuration",
		"on Flatcar, copy /usr/share/containerd/config.toml to /etc/containerd/config.toml (replacing the link), as Flatcar documents for changing it"); err != nil {
		return err
	}
	main, err := readContainerdFile(w, ContainerdConfig)
	exists := err == nil
	switch {
	case errors.Is(err, os.ErrNotExist):
		v := c.newVersion
		if v == 0 {
			v = 2
		}
		main = &containerdFile{path: ContainerdConfig, doc: map[string]any{"version": int64(v)}}
	case err != nil:
		return err
	}
	version := main.version()
	// Version 4 (containerd 2.2 and later, `containerd config default`)
	// keeps version 3's plugin IDs.
	if version > 4 {
		return fmt.Errorf("%s has version = %d: oomguard supports containerd 1.7 (versions 1 and 2) and 2.x (versions 1 to 4)", ContainerdConfig, version)
	}
	dropIn, imp := ContainerdDropIn, ""
	if imports := main.imports(); len(imports) > 0 {
		// EKS's AL2 bootstrap imports /etc/containerd/config.d/*.toml: the
		// drop-in goes where an import already reads, the main file untouched.
		if dropIn, imp = importedDropIn(imports); dropIn == "" {
			return fmt.Errorf("%s has imports %q, none a directory glob a drop-in can join: add %q to its imports list and run install again",
				ContainerdConfig, imports, containerdImports)
		}
	}
	if err := linkCheck(w, filepath.Dir(dropIn), "the directory of oomguard's drop-in", "create it there, or mount it"); err != nil {
		return err
	}
	files, err := loadOrder(w, main, dropIn)
	if err != nil {
		return err
	}
	after := false
	for _, f := range files {
		if f.path == dropIn {
			after = true
			continue
		}
		if s, ok := f.nri(); after && ok {
			if err := laterNRI(f.path, s, cfg); err != nil {
				return err
			}
		}
	}
	if c.failClosed {
		if err := validatorKept(files, dropIn); err != nil {
			return err
		}
	}
	if err := w.WriteFile(dropIn, []byte(containerdDropInText(cfg, version, c.failClosed)), 0o644); err != nil {
		return err
	}
	if imp != "" {
		fmt.Fprintf(w.Out(), "unchanged %s (imports %s)\n", ContainerdConfig, imp)
		return nil
	}
	if !exists {
		return w.WriteFile(ContainerdConfig, fmt.Appendf(nil, "# Written by oomguard-nri install.\nversion = %d\nimports = [%q]\n", version, containerdImports), 0o644)
	}
	updated, err := withImports(main.raw, containerdImports)
	if err != nil {
		return fmt.Errorf("%s: %w; add imports = [%q] to it yourself and run install again", ContainerdConfig, err, containerdImports)
	}
	return w.Modify(ContainerdConfig, updated, ContainerdBackupEx, "added imports to")
}

// keepsNRI: the last NRI section containerd loads (it replaces
// any before it whole) neither disables NRI nor moves its socket; with none,
// the running runtime's defaults stand.
func (containerd) keepsNRI(w *changes.Set, cfg *config.Config) (bool, error) {
	main, err := readContainerdFile(w, ContainerdConfig)
	if err != nil {
		if !w.Exists(ContainerdConfig) {
			return true, nil // containerd runs on its defaults
		}
		return false, err
	}
	files, err := loadOrder(w, main, "")
	if err != nil {
		return false, err
	}
	var last map[string]any
	for _, f := range files {
		if s, ok := f.nri(); ok {
			last = s
		}
	}
	if d, ok := last["disable"].(bool); ok && d {
		return false, nil
	}
	if s, ok := last["socket_path"].(string); ok && s != cfg.NRI.Socket {
		return false, nil
	}
	return true, nil
}

// laterNRI refuses a file containerd reads after oomguard's drop-in whose
// NRI section, which replaces oomguard's whole, would not leave NRI on at
// oomguard's socket.
func laterNRI(p string, s map[string]any, cfg *config.Config) error {
	if d, ok := s["disable"].(bool); !ok || d {
		return fmt.Errorf("%s is read after oomguard's drop-in and its [plugins.%q] section, which replaces oomguard's, does not say disable = false: "+
			"NRI would stay off; set disable = false there (or remove the section) and run install again", p, nriPluginID)
	}
	if sock, ok := s["socket_path"].(string); ok && sock != cfg.NRI.Socket {
		return fmt.Errorf("%s is read after oomguard's drop-in and puts NRI's socket at %s, not %s: pass --socket %s (or change it there) and run install again",
			p, sock, cfg.NRI.Socket, sock)
	}
	return nil
}

// validatorKept refuses, for --fail-closed, a configuration that would
// leave NRI's default validator off after oomguard's drop-in turns it on, or
// let a pod opt out of it: containerd 2.x merges the files' sections key by
// key, the last file to set a key winning.
func validatorKept(files []*containerdFile, dropIn string) error {
	var off, tolerate, tolerateFrom string
	after := false
	for _, f := range files {
		if f.path == dropIn {
			after, off = true, ""
			continue
		}
		s, _ := f.nri()
		v, _ := s["default_validator"].(map[string]any)
		if e, ok := v["enable"].(bool); ok && after {
			off = ""
			if !e {
				off = f.path
			}
		}
		if t, ok := v["tolerate_missing_plugins_annotation"].(string); ok {
			tolerate, tolerateFrom = t, f.path
		}
	}
	if off != "" {
		return fmt.Errorf("%s is read after oomguard's drop-in and sets [plugins.%q.default_validator] enable = false, which wins: "+
			"the runtime would not fail closed; remove that line and run install again", off, nriPluginID)
	}
	if tolerate != "" {
		return fmt.Errorf("%s sets the validator's tolerate_missing_plugins_annotation = %q: any pod annotated %s: \"true\" would start while oomguard is away. "+
			"Remove it to fail closed, or install without --fail-closed", tolerateFrom, tolerate, tolerate)
	}
	return nil
}

// linkCheck refuses a path reached through a link whose end the root does
// not show: on the node it leads somewhere this process cannot see (the
// DaemonSet mounts only the node's /etc), and writing there would replace
// the link or create files in the wrong place.
func linkCheck(w *changes.Set, p, what, hint string) error {
	resolved, viaLink, err := w.Linked(p)
	if err != nil || !viaLink || w.Exists(p) {
		return err
	}
	msg := fmt.Sprintf("%s %s is reached through a link to %s, which %s does not show: oomguard changes nothing through it",
		what, p, strings.TrimPrefix(resolved, w.Root()), w.Root())
	if hint != "" {
		msg += "; " + hint
	}
	return errors.New(msg)
}

// withImports sets the top-level imports of a containerd configuration to
// the one pattern, editing the text where the key is (or adding it after
// version), so that comments, order, line endings and a byte order mark stay
// as they were. The result must decode to the same configuration but for
// imports, or nothing is changed.
func withImports(raw []byte, pattern string) ([]byte, error) {
	body := bytes.TrimPrefix(raw, bom)
	head := raw[:len(raw)-len(body)]
	eol := "\n"
	if bytes.Contains(body, []byte("\r\n")) {
		eol = "\r\n"
	}
	line := fmt.Sprintf("imports = [%q]", pattern)
	var p unstable.Parser
	p.Reset(body)
	var at, end = -1, -1
	insert := 0
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue {
			break // a table: top-level keys are all before it
		}
		key := e.Key()
		key.Next()
		name := string(key.Node().Data)
		if key.Next() {
			continue // a dotted key
		}
		r := e.Raw
		switch name {
		case "imports":
			at, end = int(r.Offset), int(r.Offset+r.Length)
		case "version":
			if i := bytes.IndexByte(body[r.Offset+r.Length:], '\n'); i >= 0 {
				insert = int(r.Offset+r.Length) + i + 1
			} else {
				insert = len(body)
			}
		}
	}
	if err := p.Error(); err != nil {
		return nil, fmt.Errorf("cannot find where its top-level keys are (%v)", err)
	}
	var out []byte
	if at >= 0 {
		out = slices.Concat(head, body[:at], []byte(line), body[end:])
	} else {
		sep := ""
		if insert == len(body) && insert > 0 && body[insert-1] != '\n' {
			sep = eol
		}
		out = slices.Concat(head, body[:insert], []byte(sep+line+eol), body[insert:])
	}
	var before, after map[string]any
	if err := toml.Unmarshal(body, &before); err != nil {
		return nil, err
	}
	if err := toml.Unmarshal(bytes.TrimPrefix(out, bom), &after); err != nil {
		return nil, fmt.Errorf("adding the import would break it (%v)", err)
	}
	got := (&containerdFile{doc: after}).imports()
	delete(before, "imports")
	delete(after, "imports")
	if !reflect.DeepEqual(before, after) || !slices.Equal(got, []string{pattern}) {
		return nil, errors.New("adding the import would change more than its imports")
	}
	return out, nil
}

// keep keeps the imports oomguard added to containerd's main file
// when other files than oomguard's are imported through them (the NVIDIA
// toolkit's drop-in, an operator's): restoring the file would drop them.
func (containerd) keep(w *changes.Set) {
	if w.Backup(ContainerdConfig) == "" && !w.Owns(ContainerdConfig) {
		return
	}
	main, err := readContainerdFile(w, ContainerdConfig)
	if err != nil {
		return // Undo restores it, or leaves it if it changed
	}
	var others []string
	for _, p := range resolveImports(w, ContainerdConfig, main.imports(), "") {
		if !w.Owns(p) && w.Exists(p) {
			others = append(others, p)
		}
	}
	if len(others) > 0 {
		w.Keep(ContainerdConfig, fmt.Sprintf("its imports load %s too", strings.Join(others, ", ")))
	}
}

// importedDropIn is where oomguard's drop-in goes so that one of containerd's
// imports reads it: oomguard's own path if an import covers it, else a file
// named as oomguard's in the directory of the first import that is a glob
// matching it. Relative imports are containerd's config directory's.
func importedDropIn(imports []string) (dropIn, imp string) {
	abs := make([]string, len(imports))
	for i, imp := range imports {
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(ContainerdConfig), imp)
		}
		abs[i] = imp
	}
	for _, imp := range abs {
		if ok, _ := filepath.Match(imp, ContainerdDropIn); ok {
			return ContainerdDropIn, imp
		}
	}
	name := strings.TrimSuffix(filepath.Base(ContainerdDropIn), ".toml")
	for _, imp := range abs {
		dir, pattern := filepath.Split(imp)
		if !strings.ContainsAny(pattern, "*?[") || strings.ContainsAny(dir, "*?[") {
			continue
		}
		for _, ext := range []string{".toml", ".conf", ""} {
			if ok, _ := filepath.Match(imp, dir+name+ext); ok {
				return dir + name + ext, imp
			}
		}
	}
	return "", ""
}
