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

// KernelMeta is Debian's metapackage for the cloud kernel: no modules are
// needed for a serial console, an initramfs and cgroup v2.
const KernelMeta = "linux-image-cloud-amd64"

// EnsureKernel returns the path of a vmlinuz from Debian's cloud kernel,
// fetched with apt-get download into cacheDir on first use.
func EnsureKernel(cacheDir string) (string, error) {
	pkg, err := kernelPackage()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cacheDir, pkg)
	if k, err := findVmlinuz(dir); err == nil {
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
	// Keep only the kernel image: the modules are not used and are large.
	os.RemoveAll(filepath.Join(tmp, "lib"))
	os.RemoveAll(filepath.Join(tmp, "usr"))
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	os.Remove(debs[0])
	return findVmlinuz(dir)
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
