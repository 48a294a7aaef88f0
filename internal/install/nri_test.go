package install

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/restartstate"
)

func TestNRIOnly(t *testing.T) {
	root := newNode(t, "containerd-2-default", nil)
	o := options(root)
	o.Binary, o.NRIOnly = pluginBinary(t), true
	if out, err := runNRI(o); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	if nri := containerdLoad(t, root); nri["disable"] != false {
		t.Fatalf("NRI: %v", nri)
	}
	if _, err := os.Stat(filepath.Join(root, "/opt/nri/plugins/10-oomguard")); err == nil {
		t.Fatal("--nri-only installed the plugin binary")
	}
}

func TestNRIRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]nodeFile
		runtime string
		want    string
	}{
		{"no runtime", nil, "", "found neither /etc/containerd nor /etc/crio"},
		{"bad runtime", nil, "docker", `--runtime "docker"`},
		{"imports of single files", map[string]nodeFile{ContainerdConfig: {content: "version = 2\nimports = [\"/etc/containerd/extra.toml\"]\n"}}, "", "add \"/etc/containerd/conf.d/*.toml\" to its imports"},
		{"broken containerd config", map[string]nodeFile{ContainerdConfig: {content: "version = 2\n[plugins\n"}}, "", "is not TOML containerd can read"},
		{"unsupported version", map[string]nodeFile{ContainerdConfig: {content: "version = 5\n"}}, "", "version = 5"},
		{"invalid oomguard config", map[string]nodeFile{CRIOConfig: {}, "/etc/oomguard/config.toml": {content: "strict = maybe"}}, "", "fix the configuration first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newNode(t, "", tc.files)
			before := snapshot(t, root)
			o := options(root)
			o.Binary = pluginBinary(t)
			if tc.runtime != "" {
				o.Runtime = tc.runtime
			}
			out, err := runNRI(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, output %q; want a refusal naming %q", err, out, tc.want)
			}
			if after := snapshot(t, root); !reflect.DeepEqual(after, before) {
				t.Fatalf("a refused install changed the node:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	root := newNode(t, "", nil)
	if out, err := runUninstall(root, false, nil); err != nil || !strings.Contains(out, "nothing to uninstall") {
		t.Fatalf("uninstall of nothing: %v %s", err, out)
	}
}

// Nothing install reads may hold it: a FIFO anywhere it looks fails at once.
func TestNRINeverWaitsOnAFIFO(t *testing.T) {
	for _, p := range []string{ContainerdConfig, "/etc/crio/crio.conf.d/99-x.conf", NRIManifest, ContainerdDropIn} {
		t.Run(p, func(t *testing.T) {
			root := newNode(t, "", map[string]nodeFile{CRIOConfig: {}, "/etc/containerd/.keep": {}})
			os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
			if err := syscall.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				o := options(root)
				o.Runtime = "both"
				o.Binary = pluginBinary(t)
				_, err := runNRI(o)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "not a regular file") {
					t.Fatalf("want a refusal naming the FIFO: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("install waits on a FIFO")
			}
		})
	}
}

// Uninstall removes the directories install created: a leftover /etc/crio
// would make the next automatic install configure CRI-O on a node that runs
// containerd alone. An empty one left by something else is no runtime either.
func TestUninstallLeavesNoDirectories(t *testing.T) {
	root := newNode(t, "containerd-1.7-default", nil)
	o := options(root)
	o.Binary, o.Runtime = pluginBinary(t), "both"
	if out, err := runNRI(o); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	if out, err := runUninstall(root, false, nil); err != nil {
		t.Fatalf("uninstall: %v %s", err, out)
	}
	for _, d := range []string{"/etc/crio", "/etc/containerd/conf.d", "/etc/nri", "/opt/nri", "/etc/oomguard"} {
		if _, err := os.Stat(filepath.Join(root, d)); err == nil {
			t.Errorf("uninstall left %s", d)
		}
	}
	os.MkdirAll(filepath.Join(root, "/etc/crio"), 0o755) // empty, someone else's
	o.Runtime = "auto"
	if out, err := runNRI(o); err != nil || strings.Contains(out, "crio") {
		t.Fatalf("auto install on a containerd node: %v %s", err, out)
	}
}

// A runtime that serves NRI already (containerd >= 2.0 and CRI-O >= 1.30 by
// default) needs nothing: install --nri-only writes nothing and asks for no
// restart, unless a file of its configuration would turn NRI off or move
// its socket at the next start; a socket nothing listens on is no runtime's.
func TestNRIAlreadyOn(t *testing.T) {
	const c2 = "version = 3\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n"
	for name, tc := range map[string]struct {
		files   map[string]nodeFile
		live    bool // something listens on the socket
		stale   bool // a socket file nothing listens on
		unknown bool // want the usual install
	}{
		"containerd 2.x by default":    {files: map[string]nodeFile{ContainerdConfig: {content: c2}}, live: true},
		"containerd without a file":    {files: map[string]nodeFile{"/etc/containerd/.keep": {}}, live: true},
		"containerd, NRI not serving":  {files: map[string]nodeFile{ContainerdConfig: {content: c2}}, unknown: true},
		"containerd, a stale socket":   {files: map[string]nodeFile{ContainerdConfig: {content: c2}}, stale: true, unknown: true},
		"containerd, NRI on by a file": {files: map[string]nodeFile{ContainerdConfig: {content: c2 + "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n"}}, live: true},
		"containerd, off at the next start": {files: map[string]nodeFile{ContainerdConfig: {content: "imports = [\"/etc/containerd/conf.d/*.toml\"]\n" + c2},
			"/etc/containerd/conf.d/05-off.toml": {content: "version = 3\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n"}}, live: true, unknown: true},
		"containerd, socket elsewhere": {files: map[string]nodeFile{ContainerdConfig: {content: c2 + "[plugins.\"io.containerd.nri.v1.nri\"]\n  socket_path = \"/run/other.sock\"\n"}}, live: true, unknown: true},
		"CRI-O by default":             {files: map[string]nodeFile{CRIOConfig: {content: "[crio.runtime]\ndefault_runtime = \"runc\"\n"}}, live: true},
		"CRI-O, off by a drop-in": {files: map[string]nodeFile{CRIOConfig: {content: "[crio.nri]\nenable_nri = true\n"},
			"/etc/crio/crio.conf.d/05-off.conf": {content: "[crio.nri]\nenable_nri = false\n"}}, live: true, unknown: true},
		"CRI-O, listening elsewhere": {files: map[string]nodeFile{CRIOConfig: {content: "[crio.nri]\nnri_listen = \"/run/other.sock\"\n"}}, live: true, unknown: true},
	} {
		t.Run(name, func(t *testing.T) {
			root := newNode(t, "", tc.files)
			sock := filepath.Join(root, "var/run/nri/nri.sock")
			os.MkdirAll(filepath.Dir(sock), 0o755)
			if tc.live || tc.stale {
				l, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				if tc.stale {
					l.(*net.UnixListener).SetUnlinkOnClose(false)
					l.Close()
				} else {
					defer l.Close()
				}
			}
			before := snapshot(t, root)
			o := options(root)
			o.NRIOnly = true
			out, err := runNRI(o)
			if err != nil {
				t.Fatalf("install: %v %s", err, out)
			}
			on := strings.Contains(out, "unchanged: NRI is on in the running runtime at /var/run/nri/nri.sock") && !strings.Contains(out, "restart the runtime")
			if on == tc.unknown {
				t.Fatalf("NRI on already: %v, want %v:\n%s", on, !tc.unknown, out)
			}
			if after := snapshot(t, root); on && !reflect.DeepEqual(after, before) {
				t.Fatalf("changed the node:\nbefore %v\nafter %v", before, after)
			}
		})
	}
}

// What install leaves for the plugin: the runtime that has not read
// oomguard's drop-in (its process started before the file), and, on a run
// that changes nothing (the pod made again), still that runtime, until it
// runs again as another process.
func TestNRIStateOfTheRuntime(t *testing.T) {
	root := newNode(t, "containerd-2-default", nil)
	boot := time.Now().Add(-time.Hour).Truncate(time.Second)
	proc := func(pid int, startedAfterBoot time.Duration) {
		d := filepath.Join(root, "proc", strconv.Itoa(pid))
		os.MkdirAll(d, 0o755)
		ticks := int64(startedAfterBoot / (time.Second / 100))
		os.WriteFile(filepath.Join(d, "stat"), fmt.Appendf(nil, "%d (containerd) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 1 1\n", pid, ticks), 0o644)
	}
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/stat"), fmt.Appendf(nil, "cpu 1 2\nbtime %d\n", boot.Unix()), 0o644)
	proc(77, time.Minute) // started 59 minutes ago
	state := filepath.Join(t.TempDir(), "state.json")
	read := func() restartstate.State {
		t.Helper()
		s, err := restartstate.Read(state)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	o := options(root)
	o.NRIOnly, o.ProcRoot, o.StateFile = true, root, state
	out, err := runNRI(o)
	if s := read(); err != nil || len(s.Pending) != 1 || s.Pending[0].Unit != "containerd.service" || s.Pending[0].Process.PID != 77 || s.Socket != "/var/run/nri/nri.sock" {
		t.Fatalf("install: %v %s\nstate %+v", err, out, s)
	}
	if w := read().Waiting(root); len(w) != 1 {
		t.Fatalf("waiting for %+v", w)
	}
	out, err = runNRI(o)
	if s := read(); err != nil || len(s.Pending) != 1 || !strings.Contains(out, "containerd.service has not restarted since oomguard wrote it") ||
		!strings.Contains(out, "restart the runtime to apply: systemctl restart containerd.service") {
		t.Fatalf("an unchanged node whose runtime has not restarted: %v %s\nstate %+v", err, out, s)
	}
	os.RemoveAll(filepath.Join(root, "proc/77"))
	proc(78, time.Since(boot)+time.Second) // the runtime restarted since
	if w := read().Waiting(root); len(w) != 0 {
		t.Fatalf("the runtime restarted, still waiting for %+v", w)
	}
	out, err = runNRI(o)
	if s := read(); err != nil || len(s.Pending) != 0 || !strings.Contains(out, "unchanged: no restart needed") {
		t.Fatalf("after the runtime's restart: %v %s\nstate %+v", err, out, s)
	}
}
