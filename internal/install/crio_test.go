package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestCRIO(t *testing.T) {
	root := newNode(t, "crio-nri-off", nil)
	o := options(root)
	o.Binary = pluginBinary(t)
	if out, err := runNRI(o); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	// CRI-O reads crio.conf, then crio.conf.d in order, with BurntSushi/toml.
	var merged struct {
		Crio struct {
			NRI struct {
				Enable    bool   `toml:"enable_nri"`
				Listen    string `toml:"nri_listen"`
				PluginDir string `toml:"nri_plugin_dir"`
				ConfDir   string `toml:"nri_plugin_config_dir"`
			} `toml:"nri"`
		} `toml:"crio"`
	}
	for _, f := range []string{CRIOConfig, CRIODropIn} {
		if _, err := toml.DecodeFile(filepath.Join(root, f), &merged); err != nil {
			t.Fatalf("CRI-O cannot parse %s: %v", f, err)
		}
	}
	if n := merged.Crio.NRI; !n.Enable || n.Listen != "/var/run/nri/nri.sock" || n.PluginDir != "/opt/nri/plugins" || n.ConfDir != "/etc/nri/conf.d" {
		t.Fatalf("CRI-O NRI settings: %+v", n)
	}
	if out, _ := runNRI(o); strings.Contains(out, "wrote") {
		t.Fatalf("second install changed something: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, CRIOConfig)); string(b) != shapeFile(t, "crio-nri-off", CRIOConfig) {
		t.Fatal("the main CRI-O config must never be touched")
	}
}
