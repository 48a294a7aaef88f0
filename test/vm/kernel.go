package vm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// KernelMeta is Debian's metapackage for the cloud kernel: a serial console,
// an initramfs and cgroup v2 are built in; the network (for a kubelet that
// registers with an API server on the build host) needs NetModules.
const KernelMeta = "linux-image-cloud-amd64"

// NetModules are the cloud kernel's modules for a virtio-net card, in the
// order they load (each needs the ones before it).
var NetModules = []string{
	"drivers/virtio/virtio_ring.ko", "drivers/virtio/virtio.ko",
	"drivers/virtio/virtio_pci_modern_dev.ko", "drivers/virtio/virtio_pci_legacy_dev.ko", "drivers/virtio/virtio_pci.ko",
	"net/core/failover.ko", "drivers/net/net_failover.ko", "drivers/net/virtio_net.ko",
}

// EnsureKernel returns the path of a vmlinuz from Debian's cloud kernel,
// fetched with apt-get download into cacheDir on first use, with NetModules
// beside it in modules/.
func EnsureKernel(cacheDir string) (string, error) {
	pkg, err := kernelPackage()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cacheDir, pkg)
	if k, err := findVmlinuz(dir); err == nil && haveModules(dir) {
		return k, nil
	}
	dl := filepath.Join(cacheDir, "download")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("apt-get", "download", pkg)
	cmd.Dir = dl
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %v: %s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, pkg+"_*.deb"))
	if len(debs) == 0 {
		return "", fmt.Errorf("apt-get download %s left no .deb in %s", pkg, dl)
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %v: %s", debs[0], err, out)
	}
	// Keep only the kernel image and the network's modules: the rest is large.
	mods, _ := filepath.Glob(filepath.Join(tmp, "lib", "modules", "*", "kernel"))
	if len(mods) != 1 {
		return "", fmt.Errorf("%s holds no lib/modules/VERSION/kernel", debs[0])
	}
	if err := os.MkdirAll(filepath.Join(tmp, "modules"), 0o755); err != nil {
		return "", err
	}
	for _, m := range NetModules {
		if err := os.Rename(filepath.Join(mods[0], m), filepath.Join(tmp, "modules", filepath.Base(m))); err != nil {
			return "", fmt.Errorf("the kernel package has no %s: %w", m, err)
		}
	}
	os.RemoveAll(filepath.Join(tmp, "lib"))
	os.RemoveAll(filepath.Join(tmp, "usr"))
	os.RemoveAll(dir) // a cache from before the modules were kept
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	os.Remove(debs[0])
	return findVmlinuz(dir)
}

// KernelModules is where EnsureKernel keeps NetModules for kernel k.
func KernelModules(k string) string { return filepath.Join(filepath.Dir(filepath.Dir(k)), "modules") }

func haveModules(dir string) bool {
	for _, m := range NetModules {
		if _, err := os.Stat(filepath.Join(dir, "modules", filepath.Base(m))); err != nil {
			return false
		}
	}
	return true
}

var dependsRE = regexp.MustCompile(`Depends: (linux-image-[0-9][^\s]*-cloud-amd64)`)

// kernelPackage names the versioned package the metapackage points at.
func kernelPackage() (string, error) {
	out, err := exec.Command("apt-cache", "depends", KernelMeta).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w (run apt-get update first)", KernelMeta, err)
	}
	m := dependsRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("apt-cache knows no kernel for %s: run apt-get update", KernelMeta)
	}
	return m[1], nil
}

func findVmlinuz(dir string) (string, error) {
	ks, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	if len(ks) == 0 {
		return "", errors.New("no vmlinuz in " + dir)
	}
	return ks[0], nil
}

// QEMU is the emulator binary the harness runs.
const QEMU = "qemu-system-x86_64"

// Available says why VMs cannot run here, or nil.
func Available() error {
	var missing []string
	for _, c := range []string{QEMU, "runc", "apt-get", "dpkg-deb", "ldd"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (make e2e installs qemu-system-x86 and runc)", strings.Join(missing, ", "))
	}
	return nil
}
