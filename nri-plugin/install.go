package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/atomicfile"
)

// Paths on the node; install writes them below --root.
const (
	pluginDir          = "/opt/nri/plugins"
	pluginConfDir      = "/etc/nri/conf.d"
	containerdConfig   = "/etc/containerd/config.toml"
	containerdDropIn   = "/etc/containerd/conf.d/10-oomguard-nri.toml"
	containerdImports  = "/etc/containerd/conf.d/*.toml"
	crioDropIn         = "/etc/crio/crio.conf.d/10-oomguard-nri.conf"
	installManifest    = "/etc/oomguard/nri-install.json"
	containerdBackupEx = ".oomguard-backup"
)

// manifest records what install did, so uninstall undoes exactly that.
type manifest struct {
	Files   []string          `json:"files"`             // created or owned by oomguard
	Backups map[string]string `json:"backups,omitempty"` // modified file → its backup
	Written map[string]string `json:"written,omitempty"` // modified file → the content install left
}

type installer struct {
	root   string
	dryRun bool
	out    io.Writer
	man    manifest
}

func cmdInstall(args []string, stdout, stderr io.Writer, uninstall bool) int {
	name := "install"
	if uninstall {
		name = "uninstall"
	}
	fs := flag.NewFlagSet("oomguard-nri "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "/", "the node's filesystem root")
	dryRun := fs.Bool("dry-run", false, "show what would change without changing anything")
	runtime := fs.String("runtime", "auto", "auto, containerd, crio, or both")
	binary := fs.String("binary", "", "the oomguard-nri binary to install (default: this one)")
	cfgPath := fs.String("config", config.DefaultPath, "the oomguard configuration the plugin reads, as a path on the node")
	nriOnly := fs.Bool("nri-only", false, "only enable NRI in the runtime, for the DaemonSet: no plugin binary or config link")
	ctrdVersion := fs.Int("containerd-config-version", 0, "config version for a new containerd config.toml: 2 (containerd 1.7) or 3 (2.x); 0 keeps the existing one's")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-nri %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	in := &installer{root: *root, dryRun: *dryRun, out: stdout}
	var err error
	if uninstall {
		err = in.uninstall()
	} else {
		err = in.install(*runtime, *binary, *cfgPath, *ctrdVersion, *nriOnly)
	}
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-nri %s: %v\n", name, err)
		return 1
	}
	return 0
}

func (in *installer) host(p string) string { return filepath.Join(in.root, p) }

func (in *installer) install(runtime, binary, cfgPath string, ctrdVersion int, nriOnly bool) error {
	cfg := config.Default()
	if c, err := config.Load(in.host(cfgPath)); err == nil {
		cfg = c
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: fix the configuration first", err)
	} else {
		fmt.Fprintf(in.out, "note: %s does not exist yet; install it (deploy/config.toml) before the runtime starts the plugin\n", cfgPath)
	}
	var useContainerd, useCRIO bool
	switch runtime {
	case "auto":
		useContainerd = exists(in.host("/etc/containerd"))
		useCRIO = exists(in.host("/etc/crio"))
		if !useContainerd && !useCRIO {
			return errors.New("found neither /etc/containerd nor /etc/crio: pass --runtime containerd or --runtime crio")
		}
	case "containerd":
		useContainerd = true
	case "crio":
		useCRIO = true
	case "both":
		useContainerd, useCRIO = true, true
	default:
		return fmt.Errorf("--runtime %q: want auto, containerd, crio or both", runtime)
	}
	in.man = in.readManifest()

	if !nriOnly {
		if err := in.plugin(cfg, binary, cfgPath); err != nil {
			return err
		}
	}
	if useContainerd {
		if err := in.containerd(cfg, ctrdVersion); err != nil {
			return err
		}
	}
	if useCRIO {
		if err := in.writeFile(crioDropIn, []byte(crioDropInText(cfg)), 0o644); err != nil {
			return err
		}
	}
	if err := in.saveManifest(); err != nil {
		return err
	}
	if useContainerd {
		fmt.Fprintln(in.out, "restart containerd to apply: systemctl restart containerd")
	}
	if useCRIO {
		fmt.Fprintln(in.out, "restart CRI-O to apply: systemctl restart crio")
	}
	return nil
}

// plugin puts the binary where the runtime launches plugins, with its config.
func (in *installer) plugin(cfg *config.Config, binary, cfgPath string) error {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary (%w): pass --binary", err)
		}
		binary = exe
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("read the plugin binary: %w", err)
	}
	if err := in.writeFile(path.Join(pluginDir, cfg.NRI.PluginIndex+"-"+cfg.NRI.PluginName), bin, 0o755); err != nil {
		return err
	}
	// The runtime passes this file to the plugin at Configure: a link keeps
	// one configuration for the plugin, the hook and the doctor.
	return in.symlink(path.Join(pluginConfDir, cfg.NRI.PluginIndex+"-"+cfg.NRI.PluginName+".conf"), cfgPath)
}

func nriSettings(cfg *config.Config) (socket, plugins, confs string) {
	return cfg.NRI.Socket, pluginDir, pluginConfDir
}

func containerdDropInText(cfg *config.Config, version int) string {
	socket, plugins, confs := nriSettings(cfg)
	return fmt.Sprintf(`# Written by oomguard-nri install: enables NRI and oomguard's plugin.
version = %d

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  plugin_config_path = %q
  plugin_path = %q
  socket_path = %q
`, version, confs, plugins, socket)
}

func crioDropInText(cfg *config.Config) string {
	socket, plugins, confs := nriSettings(cfg)
	return fmt.Sprintf(`# Written by oomguard-nri install: enables NRI and oomguard's plugin.
[crio.nri]
enable_nri = true
nri_listen = %q
nri_plugin_dir = %q
nri_plugin_config_dir = %q
`, socket, plugins, confs)
}

var (
	versionLine  = regexp.MustCompile(`(?m)^version\s*=\s*(\d+)\s*$`)
	emptyImports = regexp.MustCompile(`(?m)^imports\s*=\s*\[\s*\]\s*$`)
)

// containerd writes the NRI drop-in and makes the main config import it:
// the main file is only touched when it has no imports at all, after a backup.
func (in *installer) containerd(cfg *config.Config, wantVersion int) error {
	mainPath := in.host(containerdConfig)
	main, err := os.ReadFile(mainPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", containerdConfig, err)
	}
	version := wantVersion
	if m := versionLine.FindSubmatch(main); m != nil {
		fmt.Sscan(string(m[1]), &version)
	}
	if version == 0 {
		version = 2
	}
	if version != 2 && version != 3 {
		return fmt.Errorf("%s has version = %d: oomguard supports containerd 1.7 (version 2) and 2.x (version 3)", containerdConfig, version)
	}
	if err := in.writeFile(containerdDropIn, []byte(containerdDropInText(cfg, version)), 0o644); err != nil {
		return err
	}
	var parsed struct {
		Imports []string `toml:"imports"`
	}
	if _, err := toml.Decode(string(main), &parsed); err != nil {
		return fmt.Errorf("%s is not valid TOML (%v): fix it first", containerdConfig, err)
	}
	for _, imp := range parsed.Imports {
		if ok, _ := filepath.Match(imp, containerdDropIn); ok || imp == containerdDropIn {
			fmt.Fprintf(in.out, "unchanged %s (imports %s)\n", containerdConfig, imp)
			return nil
		}
	}
	if len(parsed.Imports) > 0 {
		return fmt.Errorf("%s has imports %q that do not cover %s: add %q to its imports list and run install again",
			containerdConfig, parsed.Imports, containerdDropIn, containerdImports)
	}
	line := fmt.Sprintf("imports = [%q]\n", containerdImports)
	var updated []byte
	switch loc := versionLine.FindIndex(main); {
	case emptyImports.Match(main): // `containerd config default` writes imports = []
		updated = emptyImports.ReplaceAll(main, []byte(strings.TrimSuffix(line, "\n")))
	case main == nil:
		updated = []byte(fmt.Sprintf("# Written by oomguard-nri install.\nversion = %d\n%s", version, line))
	case loc != nil:
		updated = append(append(append([]byte{}, main[:loc[1]]...), '\n'), append([]byte(line), main[loc[1]:]...)...)
	default:
		updated = append([]byte(line), main...)
	}
	if main != nil {
		backup := containerdConfig + containerdBackupEx
		if _, done := in.man.Backups[containerdConfig]; !done {
			if err := in.writeRaw(backup, main, 0o644, "backed up "+containerdConfig+" to"); err != nil {
				return err
			}
			if in.man.Backups == nil {
				in.man.Backups = map[string]string{}
			}
			in.man.Backups[containerdConfig] = backup
		}
	} else {
		in.own(containerdConfig)
	}
	if in.man.Written == nil {
		in.man.Written = map[string]string{}
	}
	in.man.Written[containerdConfig] = string(updated)
	return in.writeRaw(containerdConfig, updated, 0o644, "added imports to")
}

// writeFile writes an oomguard-owned file, reporting unchanged when it is.
func (in *installer) writeFile(p string, data []byte, mode os.FileMode) error {
	in.own(p)
	return in.writeRaw(p, data, mode, "wrote")
}

func (in *installer) writeRaw(p string, data []byte, mode os.FileMode, verb string) error {
	if old, err := os.ReadFile(in.host(p)); err == nil && bytes.Equal(old, data) {
		fmt.Fprintf(in.out, "unchanged %s\n", p)
		return nil
	}
	if in.dryRun {
		fmt.Fprintf(in.out, "would: %s %s\n", verb, p)
		return nil
	}
	if err := atomicfile.Write(in.host(p), data, mode); err != nil {
		return err
	}
	fmt.Fprintf(in.out, "%s %s\n", verb, p)
	return nil
}

func (in *installer) symlink(p, target string) error {
	in.own(p)
	if t, err := os.Readlink(in.host(p)); err == nil && t == target {
		fmt.Fprintf(in.out, "unchanged %s -> %s\n", p, target)
		return nil
	}
	if in.dryRun {
		fmt.Fprintf(in.out, "would: link %s -> %s\n", p, target)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(in.host(p)), 0o755); err != nil {
		return err
	}
	os.Remove(in.host(p))
	if err := os.Symlink(target, in.host(p)); err != nil {
		return err
	}
	fmt.Fprintf(in.out, "linked %s -> %s\n", p, target)
	return nil
}

func (in *installer) own(p string) {
	for _, f := range in.man.Files {
		if f == p {
			return
		}
	}
	in.man.Files = append(in.man.Files, p)
}

func (in *installer) readManifest() manifest {
	var m manifest
	if b, err := os.ReadFile(in.host(installManifest)); err == nil {
		json.Unmarshal(b, &m)
	}
	return m
}

func (in *installer) saveManifest() error {
	b, err := json.MarshalIndent(in.man, "", "  ")
	if err != nil {
		return err
	}
	if in.dryRun {
		return nil
	}
	return atomicfile.Write(in.host(installManifest), append(b, '\n'), 0o644)
}

// uninstall removes what install created and restores what it modified,
// unless someone changed that file since.
func (in *installer) uninstall() error {
	b, err := os.ReadFile(in.host(installManifest))
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(in.out, "nothing to uninstall: "+installManifest+" does not exist")
		return nil
	}
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s is not valid JSON (%v): remove the files it lists by hand", installManifest, err)
	}
	var errs []error
	for modified, backup := range m.Backups {
		cur, _ := os.ReadFile(in.host(modified))
		if string(cur) != m.Written[modified] {
			fmt.Fprintf(in.out, "left %s alone: it changed since install; its original is %s\n", modified, backup)
			continue
		}
		if in.dryRun {
			fmt.Fprintf(in.out, "would: restore %s from %s\n", modified, backup)
			continue
		}
		if err := os.Rename(in.host(backup), in.host(modified)); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(in.out, "restored %s\n", modified)
	}
	for _, f := range append(m.Files, installManifest) {
		if _, err := os.Lstat(in.host(f)); err != nil {
			continue
		}
		if in.dryRun {
			fmt.Fprintf(in.out, "would: remove %s\n", f)
			continue
		}
		if err := os.Remove(in.host(f)); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(in.out, "removed %s\n", f)
	}
	return errors.Join(errs...)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
