package install

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// --fail-closed turns on the runtime's NRI validator in oomguard's drop-in,
// and refuses, changing nothing, a configuration that would turn it off
// again or let a pod opt out of it (a tolerate annotation).
func TestFailClosed(t *testing.T) {
	const (
		later    = "/etc/containerd/conf.d/99-later.toml"
		crioLate = CRIODropInDir + "/99-later.conf"
	)
	imports := "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
	for _, tc := range []struct {
		name, shape, runtime string
		files                map[string]nodeFile
		refuse               string // the refusal, "" for an install
		off                  bool   // without --fail-closed
	}{
		{name: "containerd 2.4 as it ships", shape: "containerd-2.4-default"},
		{name: "containerd 2 as it ships", shape: "containerd-2-default"},
		{name: "containerd, a tolerate annotation", files: map[string]nodeFile{ContainerdConfig: {content: imports +
			"[plugins.'io.containerd.nri.v1.nri'.default_validator]\n  tolerate_missing_plugins_annotation = 'example.com/unguarded'\n"}},
			refuse: "tolerate_missing_plugins_annotation = \"example.com/unguarded\""},
		{name: "containerd, a tolerate annotation, not failing closed", off: true, files: map[string]nodeFile{ContainerdConfig: {content: imports +
			"[plugins.'io.containerd.nri.v1.nri'.default_validator]\n  tolerate_missing_plugins_annotation = 'example.com/unguarded'\n"}}},
		{name: "containerd, a later file turns the validator off", files: map[string]nodeFile{ContainerdConfig: {content: imports},
			later: {content: "version = 3\n[plugins.'io.containerd.nri.v1.nri']\n  disable = false\n  [plugins.'io.containerd.nri.v1.nri'.default_validator]\n    enable = false\n"}},
			refuse: "99-later.toml is read after oomguard's drop-in and sets [plugins.\"io.containerd.nri.v1.nri\".default_validator] enable = false"},
		{name: "containerd, an earlier off is overridden", files: map[string]nodeFile{ContainerdConfig: {content: imports +
			"[plugins.'io.containerd.nri.v1.nri'.default_validator]\n  enable = false\n  required_plugins = ['other']\n"}}},
		{name: "CRI-O as it ships", shape: "crio-1.36-default", runtime: "crio"},
		{name: "CRI-O, a tolerate annotation", shape: "crio-fresh", runtime: "crio", files: map[string]nodeFile{CRIOConfig: {content: "[crio.nri.default_validator]\nnri_validator_tolerate_missing_plugins_annotation = \"x/y\"\n"}},
			refuse: "nri_validator_tolerate_missing_plugins_annotation = \"x/y\""},
		{name: "CRI-O, a later drop-in turns the validator off", shape: "crio-fresh", runtime: "crio", files: map[string]nodeFile{crioLate: {content: "[crio.nri.default_validator]\nnri_enable_default_validator = false\n"}},
			refuse: "99-later.conf is read after oomguard's drop-in and sets nri_enable_default_validator = false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newNode(t, tc.shape, tc.files)
			o := options(root)
			o.NRIOnly, o.FailClosed = true, !tc.off
			if tc.runtime != "" {
				o.Runtime = tc.runtime
			}
			before := snapshot(t, root)
			out, err := runNRI(o)
			if tc.refuse != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("error %v, want a refusal naming %q:\n%s", err, tc.refuse, out)
				}
				if after := snapshot(t, root); !reflect.DeepEqual(after, before) {
					t.Fatalf("a refused install changed the node:\nbefore %v\nafter  %v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("install: %v\n%s", err, out)
			}
			if got := validatorOn(t, root, o.Runtime); got != !tc.off {
				t.Fatalf("the validator on: %v, want %v\n%s", got, !tc.off, out)
			}
			if out, err := runNRI(o); err != nil || strings.Contains(out, "wrote") {
				t.Errorf("a second install changed something: %v\n%s", err, out)
			}
			if out, err := runUninstall(root, false, nil); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out)
			}
			if after := snapshot(t, root); !reflect.DeepEqual(after, before) {
				t.Errorf("uninstall did not give the node back:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// validatorOn is the validator's enable as the runtime merges its files
// (the loaders' e2e test has the real runtimes read them).
func validatorOn(t *testing.T, root, runtime string) bool {
	t.Helper()
	if runtime == "crio" {
		// crio.conf, then the drop-ins in name order (Glob sorts).
		dropIns, _ := filepath.Glob(filepath.Join(root, CRIODropInDir, "*"))
		on := false
		for _, f := range append([]string{filepath.Join(root, CRIOConfig)}, dropIns...) {
			var c crioNRI
			if _, err := toml.DecodeFile(f, &c); err != nil && !os.IsNotExist(err) {
				t.Fatalf("CRI-O cannot parse %s: %v", f, err)
			}
			if e := c.Crio.NRI.Validator.Enable; e != nil {
				on = *e
			}
		}
		return on
	}
	v, _ := containerdLoad(t, root)["default_validator"].(map[string]any)
	return v["enable"] == true
}
