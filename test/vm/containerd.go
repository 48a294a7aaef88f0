package vm

import (
	"embed"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/testbin"
)

// Runtime is a CRI runtime the VM runs: its build (make components), its
// node configuration, and its CRI socket; and the node it is tested on, the
// combination of kernel and kubelet it belongs to (Combinations).
type Runtime struct {
	Name       string // containerd or crio
	Version    string
	Component  string // its build: containerd-2, containerd-2.1.4, containerd-1.7.35, containerd-1.7.25, crio, crio-1.34.11
	Socket     string
	bins       []string // the component's binaries, into /usr/local/bin
	config     string   // its main configuration file in the VM
	configBody string   // what it holds: testdata/runtimes/configBody
	// Kubelet and Kernel are the node's: the kubelet's component (Kubelet…)
	// and the kernel's name (Kernels).
	Kubelet, Kernel string
	// MatrixOnly: booted by make e2e-matrix, not by CI's make e2e-vm.
	MatrixOnly bool
}

// String names the runtime and its release, as variants are named:
// containerd-2.4.2, crio-1.36.3.
func (rt Runtime) String() string { return rt.Name + "-" + rt.Version }

// The kubelets, by their components (make components): the newest release
// (with the control plane every cluster boot runs: Kubernetes' skew policy
// lets a kubelet be three minors older than its API server) and the oldest
// supported.
const (
	KubeletNewest = "kubernetes"   // v1.37.2, with the control plane
	KubeletOldest = "kubelet-1.34" // v1.34.4
)

// KubeletVersion is the release of a kubelet component.
func KubeletVersion(component string) string {
	return map[string]string{KubeletNewest: "1.37.2", KubeletOldest: "1.34.4"}[component]
}

// The runtimes the VM tier runs, each on its combination:
//   - the newest (CI and the matrix): kernel 6.12, kubelet 1.37, containerd 2.4
//     and CRI-O 1.36;
//   - the oldest supported (CI and the matrix): kernel 6.1, kubelet 1.34,
//     containerd 1.7, its newest release and one before 1.7.26 (which
//     ignores NRI's score adjustment);
//   - between them (the matrix only): kernel 6.1, kubelet 1.34, containerd
//     2.1 and CRI-O 1.34, what the tier ran before the newest.
var (
	Containerd2 = Runtime{Name: "containerd", Version: "2.4.2", Component: "containerd-2", Socket: "/run/containerd/containerd.sock",
		bins: []string{"containerd", "containerd-shim-runc-v2"}, config: "/etc/containerd/config.toml", configBody: "containerd-2.toml",
		Kubelet: KubeletNewest, Kernel: KernelNewest.Name}
	CRIO = Runtime{Name: "crio", Version: "1.36.3", Component: "crio", Socket: "/run/crio/crio.sock",
		bins: []string{"crio", "copyimg", "pinns"}, config: "/etc/crio/crio.conf", configBody: "crio.conf",
		Kubelet: KubeletNewest, Kernel: KernelNewest.Name}
	Containerd17 = Runtime{Name: "containerd", Version: "1.7.35", Component: "containerd-1.7.35", Socket: "/run/containerd/containerd.sock",
		bins: []string{"containerd", "containerd-shim-runc-v2"}, config: "/etc/containerd/config.toml", configBody: "containerd-1.7.toml",
		Kubelet: KubeletOldest, Kernel: KernelOldest.Name}
	Containerd17Old = Runtime{Name: "containerd", Version: "1.7.25", Component: "containerd-1.7.25", Socket: "/run/containerd/containerd.sock",
		bins: []string{"containerd", "containerd-shim-runc-v2"}, config: "/etc/containerd/config.toml", configBody: "containerd-1.7.toml",
		Kubelet: KubeletOldest, Kernel: KernelOldest.Name}
	Containerd21 = Runtime{Name: "containerd", Version: "2.1.4", Component: "containerd-2.1.4", Socket: "/run/containerd/containerd.sock",
		bins: []string{"containerd", "containerd-shim-runc-v2"}, config: "/etc/containerd/config.toml", configBody: "containerd-2.toml",
		Kubelet: KubeletOldest, Kernel: KernelOldest.Name, MatrixOnly: true}
	CRIO134 = Runtime{Name: "crio", Version: "1.34.11", Component: "crio-1.34.11", Socket: "/run/crio/crio.sock",
		bins: []string{"crio", "copyimg", "pinns"}, config: "/etc/crio/crio.conf", configBody: "crio.conf",
		Kubelet: KubeletOldest, Kernel: KernelOldest.Name, MatrixOnly: true}
)

// Matrix says whether this run boots every combination (make e2e-matrix,
// OOMGUARD_E2E_MATRIX=1) or only the newest and the oldest (make e2e-vm, CI).
func Matrix() bool { return os.Getenv("OOMGUARD_E2E_MATRIX") == "1" }

// Selected is rts less those this run does not boot (Matrix).
func Selected(rts ...Runtime) []Runtime {
	return slices.DeleteFunc(rts, func(rt Runtime) bool { return rt.MatrixOnly && !Matrix() })
}

// runtimeConfigs are the runtimes' main configuration files as a node has
// them before oomguard: NRI off (1.7's and CRI-O's default is off; 2.x's
// is written off), so that `oomguard-nri install` turns it on as on a node.
//
//go:embed testdata/runtimes
var runtimeConfigs embed.FS

// Component is the host path of a binary make components built.
func (e *Env) Component(name, bin string) (string, error) { return testbin.Component(name, bin) }

// Images inside the VM, imported into the runtime from OCI archives.
const (
	PauseImage    = "registry.k8s.io/pause:3.10"
	WorkloadImage = "registry.example/oomguard/workload:1"
	// SelectorImage is the workload with one file more: an image of its own
	// (another ID), for rules on images.
	SelectorImage = "registry.example/oomguard/selector:2"
)

// WithRuntime puts rt, kubeletish, oomguard-nri, a pause image and the
// workload image (files) into the VM; the scripts start it with start_runtime.
func WithRuntime(g *Guest, rt Runtime, files map[string]runcbundle.ImageFile) error {
	for _, name := range rt.bins {
		p, err := g.env.Component(rt.Component, name)
		if err != nil {
			return err
		}
		if err := g.CopyFile("/usr/local/bin/"+name, p); err != nil {
			return err
		}
	}
	k, err := g.env.Component("containerd-2", "kubeletish")
	if err != nil {
		return err
	}
	if err := g.CopyFile("/usr/local/bin/kubeletish", k); err != nil {
		return err
	}
	if err := g.CopyFile(GuestBin+"/oomguard-nri", g.Bin("oomguard-nri")); err != nil {
		return err
	}
	body, err := runtimeConfigs.ReadFile("testdata/runtimes/" + rt.configBody)
	if err != nil {
		return err
	}
	g.File(rt.config, body, 0o644)
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
