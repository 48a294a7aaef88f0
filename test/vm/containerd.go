package vm

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/oomguard/oomguard/test/runcbundle"
)

// Runtime is a CRI runtime the VM runs: its build (make components), its
// node configuration, and its CRI socket.
type Runtime struct {
	Name       string // the component: containerd-2, containerd-1.7.35, containerd-1.7.25, crio
	Component  string
	Socket     string
	bins       []string // the component's binaries, into /usr/local/bin
	config     string   // its main configuration file in the VM
	configBody string
}

// The runtimes the VM tier runs: containerd 2.1.4; containerd 1.7, the newest
// release and one before 1.7.26 (which ignores NRI's score adjustment); CRI-O 1.34.
var (
	Containerd2 = Runtime{Name: "containerd", Component: "containerd-2", Socket: "/run/containerd/containerd.sock",
		bins: []string{"containerd", "containerd-shim-runc-v2"}, config: "/etc/containerd/config.toml", configBody: containerdConfig}
	Containerd17 = Runtime{Name: "containerd", Component: "containerd-1.7.35", Socket: "/run/containerd/containerd.sock",
		bins: []string{"containerd", "containerd-shim-runc-v2"}, config: "/etc/containerd/config.toml", configBody: containerd17Config}
	Containerd17Old = Runtime{Name: "containerd", Component: "containerd-1.7.25", Socket: "/run/containerd/containerd.sock",
		bins: []string{"containerd", "containerd-shim-runc-v2"}, config: "/etc/containerd/config.toml", configBody: containerd17Config}
	CRIO = Runtime{Name: "crio", Component: "crio", Socket: "/run/crio/crio.sock",
		bins: []string{"crio", "copyimg", "pinns"}, config: "/etc/crio/crio.conf", configBody: crioConfig}
)

// component is the host path of a binary make components built.
func (e *Env) component(name, bin string) (string, error) {
	p := filepath.Join(e.Components, name, bin)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run make components", p)
	}
	return p, nil
}

// Images inside the VM, imported into the runtime from OCI archives.
const (
	PauseImage    = "registry.k8s.io/pause:3.10"
	WorkloadImage = "registry.example/oomguard/workload:1"
	// SelectorImage is the workload with one file more: an image of its own
	// (another ID), for rules on images.
	SelectorImage = "registry.example/oomguard/selector:2"
)

// containerdConfig is containerd 2.x's main config as a node has it: the CRI
// with the native snapshotter (no overlay module in the initramfs), runc
// without pivot_root (the root is an initramfs), a second handler named as
// Sysbox's, NRI off and no imports, so that `oomguard-nri install` adds them
// as it would on a real node.
const containerdConfig = `version = 3
root = '/var/lib/containerd'
state = '/run/containerd'

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'native'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '` + PauseImage + `'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '/etc/containerd/certs.d'

# Pulls unpack into the CRI's snapshotter: the transfer service's default
# names overlayfs only.
[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
  platform = 'linux/amd64'
  snapshotter = 'native'

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '/usr/sbin/runc'
        NoPivotRoot = true
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sysbox-runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sysbox-runc.options]
        BinaryName = '/usr/sbin/runc'
        NoPivotRoot = true
        SystemdCgroup = false

[plugins.'io.containerd.nri.v1.nri']
  disable = true
`

// containerd17Config is containerd 1.7's, version 2, as ` + "`containerd config default`" + `
// leaves NRI: off.
const containerd17Config = `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + PauseImage + `"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        NoPivotRoot = true
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sysbox-runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sysbox-runc.options]
        BinaryName = "/usr/sbin/runc"
        NoPivotRoot = true
        SystemdCgroup = false

[plugins."io.containerd.nri.v1.nri"]
  disable = true
  disable_connections = false
  plugin_config_path = "/etc/nri/conf.d"
  plugin_path = "/opt/nri/plugins"
  socket_path = "/var/run/nri/nri.sock"
`

// crioConfig is CRI-O's as the VM can run it: cgroupfs, vfs storage (no
// overlay module), runc without pivot_root, no port mapping (no iptables),
// a second handler named as Sysbox's, and NRI off, so that
// ` + "`oomguard-nri install`" + ` turns it on with a drop-in.
const crioConfig = `[crio]
root = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
storage_driver = "vfs"

[crio.api]
listen = "/run/crio/crio.sock"

[crio.runtime]
cgroup_manager = "cgroupfs"
conmon = "/usr/local/bin/conmon"
conmon_cgroup = "pod"
no_pivot = true
selinux = false
apparmor_profile = "unconfined"
pinns_path = "/usr/local/bin/pinns"
drop_infra_ctr = true
default_runtime = "runc"
disable_hostport_mapping = true

[crio.runtime.runtimes.runc]
runtime_path = "/usr/sbin/runc"
runtime_type = "oci"
runtime_root = "/run/runc"

[crio.runtime.runtimes.sysbox-runc]
runtime_path = "/usr/sbin/runc"
runtime_type = "oci"
runtime_root = "/run/runc-sysbox"

[crio.image]
signature_policy = "/etc/containers/policy.json"
pause_image = "` + PauseImage + `"

[crio.nri]
enable_nri = false
`

// WithRuntime puts rt, kubeletish, oomguard-nri, a pause image and the
// workload image (files) into the VM; the scripts start it with start_runtime.
func WithRuntime(g *Guest, rt Runtime, files map[string]runcbundle.ImageFile) error {
	for _, name := range rt.bins {
		p, err := g.env.component(rt.Component, name)
		if err != nil {
			return err
		}
		if err := g.CopyFile("/usr/local/bin/"+name, p); err != nil {
			return err
		}
	}
	k, err := g.env.component("containerd-2", "kubeletish")
	if err != nil {
		return err
	}
	if err := g.CopyFile("/usr/local/bin/kubeletish", k); err != nil {
		return err
	}
	if err := g.CopyFile(GuestBin+"/oomguard-nri", g.Bin("oomguard-nri")); err != nil {
		return err
	}
	g.File(rt.config, []byte(rt.configBody), 0o644)
	g.File("/etc/oomguard-vm/runtime", []byte(rt.Name+"\n"+rt.Socket+"\n"), 0o644)
	if rt.Name == "crio" {
		if err := g.CopyWithLibs("/usr/local/bin/conmon", "/usr/bin/conmon"); err != nil {
			return fmt.Errorf("%w (apt-get install conmon)", err)
		}
		g.File("/etc/containers/policy.json", []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`+"\n"), 0o644)
		g.a.mkdirAll("/var/tmp")
		g.a.mkdirAll("/usr/share/containers/oci/hooks.d")
	}
	// Host-network pods get copies of these.
	g.File("/etc/hosts", []byte("127.0.0.1 localhost node\n"), 0o644)
	g.File("/etc/resolv.conf", []byte("nameserver 127.0.0.1\n"), 0o644)
	g.File("/etc/hostname", []byte("node\n"), 0o644)
	g.a.symlink("/var/run", "/run")
	pause, err := runcbundle.BusyboxImage(nil, []string{"/bin/sleep", "2147483647"})
	if err != nil {
		return err
	}
	work, err := runcbundle.BusyboxImage(files, []string{"/bin/sh"})
	if err != nil {
		return err
	}
	withMarker := maps.Clone(files)
	withMarker["/etc/selector"] = runcbundle.ImageFile{Data: []byte("selector\n"), Mode: 0o644}
	sel, err := runcbundle.BusyboxImage(withMarker, []string{"/bin/sh"})
	if err != nil {
		return err
	}
	for _, name := range []string{PauseImage, WorkloadImage, SelectorImage} {
		img := map[string]v1.Image{PauseImage: pause, WorkloadImage: work, SelectorImage: sel}[name]
		if err := g.Image(name, img); err != nil {
			return err
		}
	}
	return nil
}

// Image puts img into the VM as ref, for start_runtime to import into the
// runtime's store.
func (g *Guest) Image(ref string, img v1.Image) error {
	archive := filepath.Join(g.dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if err := runcbundle.WriteOCIArchive(archive, ref, img); err != nil {
		return err
	}
	if err := g.CopyFile("/images/"+filepath.Base(archive), archive); err != nil {
		return err
	}
	g.images = append(g.images, fmt.Sprintf("/images/%s %s\n", filepath.Base(archive), ref))
	g.File("/images/index", []byte(strings.Join(g.images, "")), 0o644)
	return nil
}

// WithContainerd is WithRuntime for containerd 2.x.
func WithContainerd(g *Guest, files map[string]runcbundle.ImageFile) error {
	return WithRuntime(g, Containerd2, files)
}
