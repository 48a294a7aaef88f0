package vm

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Kernel is a Debian cloud kernel the VM boots: a serial console, an
// initramfs and cgroup v2 are built in; the network (for a kubelet that
// registers with an API server on the build host) needs NetModules, those
// of them the release builds as modules.
type Kernel struct {
	Name  string // what a variant names it by: its major.minor
	Suite string // the Debian suite whose linux-image-cloud-amd64 it is
}

// The kernels the VM tier boots: the oldest supported and the newest, the
// long-term kernels of Debian 12 and 13 (what managed node images ran then
// and run now).
var (
	KernelOldest = Kernel{Name: "6.1", Suite: "bookworm"}
	KernelNewest = Kernel{Name: "6.12", Suite: "trixie"}
	Kernels      = []Kernel{KernelNewest, KernelOldest}
)

// KernelMeta is Debian's metapackage for the cloud kernel.
const KernelMeta = "linux-image-cloud-amd64"

// NetModules are the cloud kernel's drivers for a virtio-net card, in the
// order they load (each needs the ones before it), as paths under
// lib/modules/VERSION/kernel without the extension. 6.1 builds all of them
// as modules; 6.12 builds the virtio core in and compresses the rest (.ko.xz,
// which busybox's insmod loads as it is).
var NetModules = []string{
	"drivers/virtio/virtio_ring", "drivers/virtio/virtio",
	"drivers/virtio/virtio_pci_modern_dev", "drivers/virtio/virtio_pci_legacy_dev", "drivers/virtio/virtio_pci",
	"net/core/failover", "drivers/net/net_failover", "drivers/net/virtio_net",
}

// EnsureKernel returns the path of k's vmlinuz, fetched into cacheDir on
// first use with apt-get download from k's suite (apt's lists for it are
// kept under cacheDir, apart from the host's), with the modules of
// NetModules it has beside it in modules/ (modules/order lists them).
func EnsureKernel(cacheDir string, k Kernel) (string, error) {
	// A kernel fetched before: its suite's lists are not read again (apt-get
	// update is the network); remove cacheDir/apt-SUITE to look for a newer one.
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "linux-image-"+k.Name+".*-cloud-amd64"))
	for _, d := range dirs {
		if v, err := findVmlinuz(d); err == nil && haveModules(d) {
			return v, nil
		}
	}
	apt, err := aptFor(cacheDir, k.Suite)
	if err != nil {
		return "", err
	}
	pkg, err := kernelPackage(apt)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(pkg, "linux-image-"+k.Name+".") {
		return "", fmt.Errorf("%s's %s is %s, not a %s kernel", k.Suite, KernelMeta, pkg, k.Name)
	}
	dir := filepath.Join(cacheDir, pkg)
	if v, err := findVmlinuz(dir); err == nil && haveModules(dir) {
		return v, nil
	}
	dl := filepath.Join(cacheDir, "download")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("apt-get", "download", pkg)
	cmd.Dir, cmd.Env = dl, apt
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
	// Keep only the kernel image and the network's modules: the rest is
	// large. 6.12 has its modules under usr/ (merged /usr).
	mods, _ := filepath.Glob(filepath.Join(tmp, "lib", "modules", "*"))
	more, _ := filepath.Glob(filepath.Join(tmp, "usr", "lib", "modules", "*"))
	mods = append(mods, more...)
	if len(mods) != 1 {
		return "", fmt.Errorf("%s holds no (usr/)lib/modules/VERSION", debs[0])
	}
	if err := os.MkdirAll(filepath.Join(tmp, "modules"), 0o755); err != nil {
		return "", err
	}
	builtin, _ := os.ReadFile(filepath.Join(mods[0], "modules.builtin"))
	var order []string
	for _, m := range NetModules {
		found, _ := filepath.Glob(filepath.Join(mods[0], "kernel", m+".ko*"))
		if len(found) == 0 {
			if slices.Contains(strings.Fields(string(builtin)), "kernel/"+m+".ko") {
				continue // built in
			}
			return "", fmt.Errorf("the kernel package has no %s.ko, and does not build it in", m)
		}
		name := filepath.Base(found[0])
		if err := os.Rename(found[0], filepath.Join(tmp, "modules", name)); err != nil {
			return "", err
		}
		order = append(order, name)
	}
	if err := os.WriteFile(filepath.Join(tmp, "modules", "order"), []byte(strings.Join(order, "\n")+"\n"), 0o644); err != nil {
		return "", err
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

// KernelModules is where EnsureKernel keeps the network's modules for
// kernel k, and their file names in the order they load.
func KernelModules(k string) (dir string, order []string, err error) {
	dir = filepath.Join(filepath.Dir(filepath.Dir(k)), "modules")
	b, err := os.ReadFile(filepath.Join(dir, "order"))
	return dir, strings.Fields(string(b)), err
}

func haveModules(dir string) bool {
	_, order, err := KernelModules(filepath.Join(dir, "boot", "vmlinuz"))
	if err != nil {
		return false
	}
	for _, m := range order {
		if _, err := os.Stat(filepath.Join(dir, "modules", m)); err != nil {
			return false
		}
	}
	return true
}

// aptFor is the environment that points apt-get and apt-cache at suite
// alone (its main, updates and security archives), with lists and cache of
// its own under cacheDir/apt-SUITE, fetched on first use; Debian's keyring
// of the host verifies them.
func aptFor(cacheDir, suite string) ([]string, error) {
	dir, err := filepath.Abs(filepath.Join(cacheDir, "apt-"+suite))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"lists/partial", "cache/archives/partial", "sources.list.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	var sources strings.Builder
	for _, s := range []string{"http://deb.debian.org/debian " + suite, "http://deb.debian.org/debian " + suite + "-updates",
		"http://deb.debian.org/debian-security " + suite + "-security"} {
		fmt.Fprintf(&sources, "deb [signed-by=%s] %s main\n", keyring, s)
	}
	conf := fmt.Sprintf(`Dir::Etc::SourceList "%[1]s/sources.list";
Dir::Etc::SourceParts "%[1]s/sources.list.d";
Dir::State::Lists "%[1]s/lists";
Dir::Cache "%[1]s/cache";
Dir::State::status "/dev/null";
APT::Architectures { "amd64"; };
APT::Sandbox::User "root";
`, dir)
	if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte(sources.String()), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "apt.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "APT_CONFIG="+filepath.Join(dir, "apt.conf"))
	if lists, _ := filepath.Glob(filepath.Join(dir, "lists", "*_Packages*")); len(lists) == 0 {
		cmd := exec.Command("apt-get", "update", "-qq")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get update for %s: %v: %s", suite, err, out)
		}
	}
	return env, nil
}

var dependsRE = regexp.MustCompile(`Depends: (linux-image-[0-9][^\s]*-cloud-amd64)`)

// kernelPackage names the versioned package the metapackage points at.
func kernelPackage(env []string) (string, error) {
	cmd := exec.Command("apt-cache", "depends", KernelMeta)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w", KernelMeta, err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m := dependsRE.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", errors.New("apt-cache knows no kernel for " + KernelMeta)
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
