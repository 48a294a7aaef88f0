//go:build e2e

package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/oomguard/oomguard/test/testbin"
)

func withBOM(s string) string  { return "\xef\xbb\xbf" + s }
func withCRLF(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// A containerd that reads a node's configuration as it will when it starts:
// `containerd config dump` in a chroot of the node's root.
type loader struct {
	name     string
	bin      string
	versions []int // the config versions it reads
}

func loaders(t *testing.T) []loader {
	ls := []loader{{name: "containerd-1.7.35", versions: []int{1, 2}}, {name: "containerd-2.4.2", versions: []int{1, 2, 3}}}
	for i, comp := range []string{"containerd-1.7.35", "containerd-2"} {
		ls[i].bin = testbin.ComponentFor(t, comp, "containerd")
	}
	return ls
}

// dump is what containerd makes of the node's configuration, or why it refuses it.
func (l loader) dump(t *testing.T, root string) (map[string]any, error) {
	t.Helper()
	bin := filepath.Join(root, "bin", l.name)
	os.MkdirAll(filepath.Dir(bin), 0o755)
	if err := os.Link(l.bin, bin); err != nil {
		if b, err := os.ReadFile(l.bin); err != nil || os.WriteFile(bin, b, 0o755) != nil {
			t.Fatalf("put %s in the node: %v", l.name, err)
		}
	}
	defer os.Remove(bin)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "chroot", root, "/bin/"+l.name, "--config", ContainerdConfig, "config", "dump")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, errb.String())
	}
	var m map[string]any
	if err := toml.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("%s's dump is not TOML: %v\n%s", l.name, err, out.String())
	}
	return m, nil
}

// nriOf is the NRI plugin's section of a dump.
func nriOf(m map[string]any) map[string]any {
	p, _ := m["plugins"].(map[string]any)
	s, _ := p["io.containerd.nri.v1.nri"].(map[string]any)
	return s
}

// withoutNRI is a dump without what installing NRI changes: the NRI
// section and the list of files loaded.
func withoutNRI(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	delete(out, "imports")
	if p, ok := m["plugins"].(map[string]any); ok {
		q := map[string]any{}
		for k, v := range p {
			q[k] = v
		}
		delete(q, "io.containerd.nri.v1.nri")
		// A version-1 drop-in names NRI by its short ID too, for 1.7; 2.x
		// takes that for a gRPC plugin that does not exist, and ignores it.
		delete(q, "io.containerd.grpc.v1.nri")
		out["plugins"] = q
	}
	return out
}

// installOrRefuse runs install --nri-only with args: when refuse is set it
// must refuse, naming it, and leave the node as before (refused); else it
// must succeed.
func installOrRefuse(t *testing.T, root string, before map[string]string, refuse string, o NRIOptions) (out string, refused bool) {
	t.Helper()
	o.Root, o.NRIOnly = root, true
	out, err := runNRI(o)
	if refuse != "" {
		if err == nil || !strings.Contains(err.Error(), refuse) {
			t.Fatalf("error %v, want a refusal naming %q:\n%s", err, refuse, out)
		}
		if after := snapshot(t, root, "bin"); !reflect.DeepEqual(after, before) {
			t.Fatalf("a refused install changed the node:\nbefore %v\nafter  %v", before, after)
		}
		return out, true
	}
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	return out, false
}

// TestE2EContainerdConfigurations installs NRI into real-world containerd
// configurations and has containerd 1.7 and 2.x read each result: it must
// load, have NRI on at oomguard's socket and everything else as before;
// uninstall must give the node back byte for byte. What install cannot do
// safely it refuses, changing nothing, saying what to do.
func TestE2EContainerdConfigurations(t *testing.T) {
	ls := loaders(t)
	const cfgPath = ContainerdConfig
	shape := func(s string) string { return shapeFile(t, s, cfgPath) }
	gke, eksAL2, eksAL2023, bottlerocket, v1 := shape("gke"), shape("eks-al2"), shape("eks-al2023"), shape("bottlerocket"), shape("containerd-v1")
	flatcar := shapeFile(t, "flatcar", "/usr/share/containerd/config.toml")
	k3s := shapeFile(t, "k3s", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml")
	const nriOff = "version = 2\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n"
	for _, tc := range []struct {
		name   string
		files  map[string]nodeFile
		refuse string // the message, when install must refuse
	}{
		{name: "kubeadm, containerd 1.7 default", files: map[string]nodeFile{cfgPath: {content: "DEFAULT-1.7"}}},
		{name: "kubeadm, containerd 2 default", files: map[string]nodeFile{cfgPath: {content: "DEFAULT-2"}}},
		{name: "no config.toml", files: map[string]nodeFile{"/etc/containerd/.keep": {content: ""}}},
		{name: "EKS AL2", files: map[string]nodeFile{cfgPath: {content: eksAL2}, "/etc/containerd/config.d/00-x.toml": {content: "version = 2\n"}}},
		{name: "EKS AL2023", files: map[string]nodeFile{cfgPath: {content: eksAL2023}}},
		{name: "GKE", files: map[string]nodeFile{cfgPath: {content: gke}}},
		{name: "Bottlerocket-like, credentials in a 0600 file", files: map[string]nodeFile{cfgPath: {content: bottlerocket, mode: 0o600}}},
		{name: "imports = [] with a comment", files: map[string]nodeFile{cfgPath: {content: "version = 2\nimports = [] # none yet\n" + gke[len("version = 2\n"):]}}},
		{name: "imports = [] indented", files: map[string]nodeFile{cfgPath: {content: "version = 2\n  imports = []\n" + gke[len("version = 2\n"):]}}},
		{name: "imports over lines", files: map[string]nodeFile{cfgPath: {content: "version = 2\nimports = [\n]\n" + gke[len("version = 2\n"):]}}},
		{name: "CRLF", files: map[string]nodeFile{cfgPath: {content: withCRLF(gke)}}},
		{name: "byte order mark", files: map[string]nodeFile{cfgPath: {content: withBOM(gke)}}},
		{name: "version 1, no version line", files: map[string]nodeFile{cfgPath: {content: v1}}},
		{name: "version = 3 # comment", files: map[string]nodeFile{cfgPath: {content: "version = 3 # containerd 2\nroot = '/var/lib/containerd'\n[plugins.'io.containerd.cri.v1.images']\n  snapshotter = 'native'\n"}}},
		{name: "config.toml a relative link", files: map[string]nodeFile{cfgPath: {link: "config-prod.toml"}, "/etc/containerd/config-prod.toml": {content: gke, mode: 0o640}}},
		{name: "Flatcar, whole node", files: map[string]nodeFile{cfgPath: {link: "/usr/share/containerd/config.toml"}, "/usr/share/containerd/config.toml": {content: flatcar}}},
		{name: "Flatcar, only /etc mounted", files: map[string]nodeFile{cfgPath: {link: "/usr/share/containerd/config.toml"}},
			refuse: "is reached through a link to /usr/share/containerd/config.toml"},
		{name: "conf.d a link out of sight", files: map[string]nodeFile{cfgPath: {content: gke}, "/etc/containerd/conf.d": {link: "/var/lib/elsewhere"}},
			refuse: "is reached through a link to /var/lib/elsewhere"},
		{name: "a later drop-in turns NRI off", files: map[string]nodeFile{cfgPath: {content: "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"}, "/etc/containerd/conf.d/99-nri-off.toml": {content: nriOff}},
			refuse: "99-nri-off.toml is read after oomguard's drop-in"},
		{name: "k3s", files: map[string]nodeFile{"/etc/containerd/config.toml": {content: gke}, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml": {content: k3s}},
			refuse: "generated at every start of k3s or RKE2"},
		{name: "not TOML", files: map[string]nodeFile{cfgPath: {content: "version = 2\n[plugins\n"}}, refuse: "is not TOML containerd can read"},
		{name: "a FIFO", files: map[string]nodeFile{"/etc/containerd/.keep": {content: ""}}, refuse: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]nodeFile{}
			for p, f := range tc.files {
				switch f.content {
				case "DEFAULT-1.7", "DEFAULT-2":
					f.content = defaultConfig(t, ls[map[string]int{"DEFAULT-1.7": 0, "DEFAULT-2": 1}[f.content]])
				}
				files[p] = f
			}
			root := newNode(t, "", files)
			if tc.name == "a FIFO" {
				if err := syscall.Mkfifo(filepath.Join(root, cfgPath), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, root, "bin")
			dumps := map[string]map[string]any{}
			for _, l := range ls {
				if tc.name == "a FIFO" {
					break // containerd itself would wait on it for ever
				}
				if d, err := l.dump(t, root); err == nil {
					dumps[l.name] = d
				} else {
					t.Logf("%s refuses the node's own configuration: %v", l.name, firstLine(err))
				}
			}
			out, refused := installOrRefuse(t, root, before, tc.refuse, options(root))
			if refused {
				return
			}
			if len(dumps) == 0 {
				t.Fatal("no containerd reads this configuration: the case tests nothing")
			}
			for _, l := range ls {
				b, ok := dumps[l.name]
				if !ok {
					continue
				}
				a, err := l.dump(t, root)
				if err != nil {
					t.Fatalf("%s loaded the node's configuration, and refuses it after install: %v\n%s", l.name, err, out)
				}
				nri := nriOf(a)
				if nri["disable"] != false || nri["socket_path"] != "/var/run/nri/nri.sock" {
					t.Errorf("%s: NRI after install: %v\n%s", l.name, nri, out)
				}
				if !reflect.DeepEqual(withoutNRI(a), withoutNRI(b)) {
					t.Errorf("%s: install changed more than NRI:\nbefore %v\nafter  %v", l.name, withoutNRI(b), withoutNRI(a))
				}
			}
			for p, f := range tc.files {
				full := filepath.Join(root, p)
				st, err := os.Lstat(full)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if f.link != "" && st.Mode()&os.ModeSymlink == 0 {
					t.Errorf("%s was a link and is not any more", p)
				}
				if f.mode != 0 {
					if st, _ := os.Stat(full); st.Mode().Perm() != f.mode {
						t.Errorf("%s: mode %v, was %v", p, st.Mode().Perm(), f.mode)
					}
					if bst, err := os.Stat(full + ContainerdBackupEx); err == nil && bst.Mode().Perm() != f.mode {
						t.Errorf("%s's backup: mode %v, the original's %v", p, bst.Mode().Perm(), f.mode)
					}
				}
				if f.mode != 0 && f.link == "" {
					if st, _ := os.Stat(full); st.Sys().(*syscall.Stat_t).Gid != 4242 {
						t.Errorf("%s: group %d, was 4242", p, st.Sys().(*syscall.Stat_t).Gid)
					}
				}
			}
			if rec, _ := os.ReadFile(filepath.Join(root, NRIManifest)); strings.Contains(string(rec), "s3cr3t") {
				t.Errorf("the install record holds the configuration's secrets:\n%s", rec)
			}
			o := options(root)
			o.NRIOnly = true
			if out, err := runNRI(o); err != nil || strings.Contains(out, "wrote") || strings.Contains(out, "added") {
				t.Errorf("a second install changed something: %v\n%s", err, out)
			}
			if out, err := runUninstall(root, false, nil); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out)
			}
			if after := snapshot(t, root, "bin"); !reflect.DeepEqual(after, before) {
				t.Errorf("uninstall did not give the node back as it was:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func defaultConfig(t *testing.T, l loader) string {
	t.Helper()
	out, err := exec.Command(l.bin, "config", "default").Output()
	if err != nil {
		t.Fatalf("%s config default: %v", l.name, err)
	}
	return string(out)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// crioEffective is what CRI-O makes of the node's configuration (`crio config`,
// chrooted into the node with its own /proc), or why it refuses it.
func crioEffective(t *testing.T, root string) (map[string]any, error) {
	t.Helper()
	out, err := crioConfigText(t, root)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := toml.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("crio config is not TOML: %v\n%s", err, out)
	}
	return m, nil
}

// crioConfigText is `crio config` for the node, as it prints it.
func crioConfigText(t *testing.T, root string) (string, error) {
	t.Helper()
	src := testbin.ComponentFor(t, "crio", "crio")
	bin := filepath.Join(root, "bin", "crio")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	if err := os.Link(src, bin); err != nil {
		t.Fatalf("put crio in the node (run make components): %v", err)
	}
	defer os.Remove(bin)
	defer os.Remove(filepath.Join(root, "proc"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "unshare", "-m", "sh", "-c", `mount -t proc proc "$1/proc" && exec chroot "$1" /bin/crio config`, "sh", root)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s", err, errb.String())
	}
	return out.String(), nil
}

// crioEffectiveNRI splits CRI-O's effective configuration into its NRI section and
// the rest.
func crioEffectiveNRI(m map[string]any) (nri map[string]any, rest map[string]any) {
	rest = map[string]any{}
	for k, v := range m {
		rest[k] = v
	}
	c, _ := m["crio"].(map[string]any)
	nri, _ = c["nri"].(map[string]any)
	cc := map[string]any{}
	for k, v := range c {
		cc[k] = v
	}
	delete(cc, "nri")
	rest["crio"] = cc
	return nri, rest
}

// TestE2ECRIOConfigurations installs NRI into CRI-O configurations and has
// the real CRI-O read each result: NRI on at oomguard's socket, the rest as
// before, uninstall giving the node back byte for byte; a later drop-in that
// would undo oomguard's is refused, changing nothing.
func TestE2ECRIOConfigurations(t *testing.T) {
	const dir = CRIODropInDir
	for _, tc := range []struct {
		name   string
		files  map[string]nodeFile
		refuse string
	}{
		{name: "fresh CRI-O", files: map[string]nodeFile{dir + "/.keep": {content: ""}}},
		{name: "crio.conf turns NRI off", files: map[string]nodeFile{CRIOConfig: {content: "[crio.nri]\nenable_nri = false\n"}}},
		{name: "earlier drop-ins", files: map[string]nodeFile{
			dir + "/01-base.conf":    {content: "[crio.runtime]\ndefault_runtime = \"crun\"\n[crio.runtime.runtimes.crun]\nruntime_path = \"/usr/bin/crun\"\n"},
			dir + "/05-nri-off.conf": {content: "[crio.nri]\nenable_nri = false\n"},
		}},
		{name: "a later drop-in turns NRI off", files: map[string]nodeFile{dir + "/99-nri-off.conf": {content: "[crio.nri]\nenable_nri = false\n"}},
			refuse: "99-nri-off.conf is read after oomguard's drop-in and sets enable_nri = false"},
		{name: "a later drop-in moves the socket", files: map[string]nodeFile{dir + "/99-socket.conf": {content: "[crio.nri]\nnri_listen = \"/run/other.sock\"\n"}},
			refuse: "puts NRI's socket at /run/other.sock"},
		{name: "a drop-in a relative link", files: map[string]nodeFile{dir + "/01-base.conf": {link: "../base.conf"}, "/etc/crio/base.conf": {content: "[crio.runtime]\nconmon_cgroup = \"pod\"\n"}}},
		{name: "drop-in directory a link out of sight", files: map[string]nodeFile{"/etc/crio/crio.conf": {content: ""}, dir: {link: "/usr/share/crio/crio.conf.d"}},
			refuse: "is reached through a link to /usr/share/crio/crio.conf.d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newNode(t, "", tc.files)
			before := snapshot(t, root, "bin")
			b, err := crioEffective(t, root)
			if err != nil && tc.refuse == "" {
				t.Fatalf("CRI-O refuses the node's own configuration: %v", err)
			}
			out, refused := installOrRefuse(t, root, before, tc.refuse, NRIOptions{Runtime: "crio", ConfigPath: "/etc/oomguard/config.toml"})
			if refused {
				return
			}
			a, err := crioEffective(t, root)
			if err != nil {
				t.Fatalf("CRI-O refuses the configuration after install: %v\n%s", err, out)
			}
			nri, rest := crioEffectiveNRI(a)
			_, restBefore := crioEffectiveNRI(b)
			if en, ok := nri["enable_nri"]; ok && en != true || nri["nri_listen"] != nil && nri["nri_listen"] != "/var/run/nri/nri.sock" {
				t.Errorf("NRI after install: %v", nri)
			}
			if !reflect.DeepEqual(rest, restBefore) {
				t.Errorf("install changed more than NRI:\nbefore %v\nafter  %v", restBefore, rest)
			}
			if out, err := runUninstall(root, false, nil); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out)
			}
			if after := snapshot(t, root, "bin"); !reflect.DeepEqual(after, before) {
				t.Errorf("uninstall did not give the node back as it was:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestE2EFailClosedConfigurations has the real runtimes read what install
// --fail-closed writes: containerd 2.4 and CRI-O 1.36 with NRI's default
// validator on and nothing a pod could use to tolerate oomguard's absence;
// containerd 1.7, which has no validator, still loading it.
func TestE2EFailClosedConfigurations(t *testing.T) {
	for _, l := range loaders(t) {
		t.Run(l.name, func(t *testing.T) {
			root := newNode(t, "", map[string]nodeFile{ContainerdConfig: {content: defaultConfig(t, l)}})
			o := options(root)
			o.NRIOnly, o.FailClosed = true, true
			if out, err := runNRI(o); err != nil {
				t.Fatalf("install: %v\n%s", err, out)
			}
			d, err := l.dump(t, root)
			if err != nil {
				t.Fatalf("%s refuses the configuration install --fail-closed wrote: %v", l.name, err)
			}
			v, _ := nriOf(d)["default_validator"].(map[string]any)
			if l.name == "containerd-1.7.35" {
				if v != nil {
					t.Fatalf("containerd 1.7 has no validator, and shows %v", v)
				}
				return
			}
			if v["enable"] != true || v["tolerate_missing_plugins_annotation"] != "" {
				t.Fatalf("%s's validator after install --fail-closed: %v", l.name, v)
			}
		})
	}
	t.Run("crio-1.36.3", func(t *testing.T) {
		root := newNode(t, "crio-1.36-default", nil)
		o := options(root)
		o.NRIOnly, o.FailClosed, o.Runtime = true, true, "crio"
		if out, err := runNRI(o); err != nil {
			t.Fatalf("install: %v\n%s", err, out)
		}
		out, err := crioConfigText(t, root)
		if err != nil {
			t.Fatalf("CRI-O refuses the configuration install --fail-closed wrote: %v", err)
		}
		// CRI-O 1.36.3 prints [crio.nri.default_validator] commented out
		// whatever it holds (it compares the defaults with themselves), with
		// the values in force.
		for _, want := range []string{"nri_enable_default_validator = true", `nri_validator_tolerate_missing_plugins_annotation = ""`} {
			if !regexp.MustCompile(`(?m)^(# )?` + regexp.QuoteMeta(want) + `$`).MatchString(out) {
				t.Errorf("CRI-O's validator after install --fail-closed lacks %q:\n%s", want, out)
			}
		}
	})
}
