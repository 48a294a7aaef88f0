package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/oomguard/oomguard/test/runcbundle"
)

// The containerd the CRI scenarios run: v2.1.4, built from its Go module in
// test/containerd by make components, with its runc shim and kubeletish.
var containerdBins = []string{"containerd", "containerd-shim-runc-v2", "kubeletish"}

// component is the host path of a binary make components built.
func (e *Env) component(name, bin string) (string, error) {
	p := filepath.Join(e.Components, name, bin)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run make components", p)
	}
	return p, nil
}

// Images inside the VM, imported into containerd from OCI archives.
const (
	PauseImage    = "registry.k8s.io/pause:3.10"
	WorkloadImage = "registry.example/oomguard/workload:1"
)

// containerdConfig is the node's main config: the CRI with the native
// snapshotter (no overlay module in the initramfs), runc without pivot_root
// (the root is an initramfs), and no imports, so that `oomguard-nri install`
// adds them as it would on a real node.
const containerdConfig = `version = 3
root = '/var/lib/containerd'
state = '/run/containerd'

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'native'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '` + PauseImage + `'

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

[plugins.'io.containerd.nri.v1.nri']
  disable = true
`

// WithContainerd puts containerd, its shim, the CRI driver, oomguard-nri, a
// pause image and the workload image (files) into the VM.
func WithContainerd(g *Guest, files map[string]runcbundle.ImageFile) error {
	for _, name := range containerdBins {
		p, err := g.env.component("containerd-2", name)
		if err != nil {
			return err
		}
		if err := g.CopyFile("/usr/local/bin/"+name, p); err != nil {
			return err
		}
	}
	if err := g.CopyFile(GuestBin+"/oomguard-nri", g.Bin("oomguard-nri")); err != nil {
		return err
	}
	g.File("/etc/containerd/config.toml", []byte(containerdConfig), 0o644)
	// Host-network pods get copies of these.
	g.File("/etc/hosts", []byte("127.0.0.1 localhost\n"), 0o644)
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
	for name, img := range map[string]v1.Image{PauseImage: pause, WorkloadImage: work} {
		archive := filepath.Join(g.dir, strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
		if err := runcbundle.WriteOCIArchive(archive, name, img); err != nil {
			return err
		}
		if err := g.CopyFile("/images/"+filepath.Base(archive), archive); err != nil {
			return err
		}
	}
	return nil
}
