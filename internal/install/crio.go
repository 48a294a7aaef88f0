package install

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/BurntSushi/toml"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/changes"
)

// CRI-O's configuration: the main file, then every file of the drop-in
// directory in name order, a later value winning (CRI-O decodes them with
// BurntSushi/toml).
const (
	CRIOConfig    = "/etc/crio/crio.conf"
	CRIODropInDir = "/etc/crio/crio.conf.d"
)

// crio is CRI-O: crio.conf, then its drop-in directory. failClosed turns
// on NRI's default validator (CRI-O 1.34 and later).
type crio struct{ failClosed bool }

func (crio) name() string                              { return "crio" }
func (crio) unit() string                              { return "crio.service" }
func (crio) comm() string                              { return "crio" }
func (crio) dir() string                               { return "/etc/crio" }
func (crio) dropIn() string                            { return CRIODropIn }
func (crio) refuse(*changes.Set, *config.Config) error { return nil }
func (crio) keep(*changes.Set)                         {}

func crioDropInText(cfg *config.Config, failClosed bool) string {
	s := fmt.Sprintf(`# Written by oomguard-nri install: enables NRI and oomguard's plugin.
[crio.nri]
enable_nri = true
nri_listen = %q
nri_plugin_dir = %q
nri_plugin_config_dir = %q
`, cfg.NRI.Socket, PluginDir, PluginConfDir)
	if failClosed {
		s += `
# Fail closed: a container whose pod requires oomguard (annotation
# required-plugins.noderesource.dev) is not created while it is away.
[crio.nri.default_validator]
nri_enable_default_validator = true
`
	}
	return s
}

// crioNRI is the part of CRI-O's configuration oomguard's drop-in sets.
type crioNRI struct {
	Crio struct {
		NRI struct {
			Enable *bool   `toml:"enable_nri"`
			Listen *string `toml:"nri_listen"`

			Validator struct {
				Enable   *bool   `toml:"nri_enable_default_validator"`
				Tolerate *string `toml:"nri_validator_tolerate_missing_plugins_annotation"`
			} `toml:"default_validator"`
		} `toml:"nri"`
	} `toml:"crio"`
}

// enable writes the NRI drop-in, refusing (changing nothing) when a file CRI-O
// reads after it would turn NRI off again or move its socket.
func (c crio) enable(w *changes.Set, cfg *config.Config) error {
	if err := linkCheck(w, CRIODropInDir, "CRI-O's drop-in directory", "create it there, or mount it"); err != nil {
		return err
	}
	files, err := crioFiles(w)
	if err != nil {
		return err
	}
	tolerate, tolerateFrom := "", ""
	for _, p := range files {
		if p == CRIOConfig && !w.Exists(p) {
			continue
		}
		n, err := readCRIONRI(w, p)
		if err != nil {
			return err
		}
		if t := n.Crio.NRI.Validator.Tolerate; t != nil {
			tolerate, tolerateFrom = *t, p
		}
		if p <= CRIODropIn || p == CRIOConfig {
			continue
		}
		if e := n.Crio.NRI.Validator.Enable; c.failClosed && e != nil && !*e {
			return fmt.Errorf("%s is read after oomguard's drop-in and sets nri_enable_default_validator = false, which wins: the runtime would not fail closed; remove that line and run install again", p)
		}
		if e := n.Crio.NRI.Enable; e != nil && !*e {
			return fmt.Errorf("%s is read after oomguard's drop-in and sets enable_nri = false, which wins: remove that line (or the file) and run install again", p)
		}
		if l := n.Crio.NRI.Listen; l != nil && *l != cfg.NRI.Socket {
			return fmt.Errorf("%s is read after oomguard's drop-in and puts NRI's socket at %s, not %s: pass --socket %s (or change it there) and run install again", p, *l, cfg.NRI.Socket, *l)
		}
	}
	if c.failClosed && tolerate != "" {
		return fmt.Errorf("%s sets nri_validator_tolerate_missing_plugins_annotation = %q: any pod annotated %s: \"true\" would start while oomguard is away. "+
			"Remove it to fail closed, or install without --fail-closed", tolerateFrom, tolerate, tolerate)
	}
	return w.WriteFile(CRIODropIn, []byte(crioDropInText(cfg, c.failClosed)), 0o644)
}

// keepsNRI: the last of CRI-O's files that sets enable_nri or
// nri_listen (CRI-O takes each key from the last file that sets it) keeps
// NRI on at oomguard's socket; unset, the running runtime's defaults stand.
func (crio) keepsNRI(w *changes.Set, cfg *config.Config) (bool, error) {
	files, err := crioFiles(w)
	if err != nil {
		return false, err
	}
	enable, listen := true, cfg.NRI.Socket
	for _, p := range files {
		if p == CRIOConfig && !w.Exists(p) {
			continue
		}
		c, err := readCRIONRI(w, p)
		if err != nil {
			return false, err
		}
		if e := c.Crio.NRI.Enable; e != nil {
			enable = *e
		}
		if l := c.Crio.NRI.Listen; l != nil {
			listen = *l
		}
	}
	return enable && listen == cfg.NRI.Socket, nil
}

// readCRIONRI is what the file p of CRI-O's configuration says of NRI.
func readCRIONRI(w *changes.Set, p string) (crioNRI, error) {
	var c crioNRI
	b, err := w.ReadFile(p, changes.MaxFile)
	if err != nil {
		return c, fmt.Errorf("read %s: %w", p, err)
	}
	if _, err := toml.Decode(string(b), &c); err != nil {
		return c, fmt.Errorf("%s is not TOML CRI-O can read (%v): fix it first", p, err)
	}
	return c, nil
}

// crioFiles are the files of CRI-O's configuration, in the order it reads them.
func crioFiles(w *changes.Set) ([]string, error) {
	files := []string{CRIOConfig}
	h, err := w.Host(CRIODropInDir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(h)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			files = append(files, filepath.Join(CRIODropInDir, e.Name()))
		}
	}
	slices.Sort(files[1:])
	return files, nil
}
