// Package vm is the harness of the VM tier: it boots a real Linux kernel
// with cgroup v2 in QEMU, from an initramfs holding busybox, runc,
// oomguard's binaries, the real runtimes and a scenario, and reads the
// scenario's results from the serial console; a cluster boot registers the
// VM's kubelet with a real control plane on the host and drives it in
// steps. The scenarios themselves are in package scenarios.
package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oomguard/oomguard/test/runcbundle"
)

// Scenario is one incident, reproduced without oomguard and ended with it.
type Scenario struct {
	Name     string
	Title    string // one line, for the demo
	MemoryMB int    // the VM's memory
	// Script is run by sh in the VM as root after /lib/oomguard-vm.sh is
	// sourced, with $VARIANT set. It reports with "@@RESULT k=v …" lines.
	Script   string
	Variants []Variant
	// Slow scenarios (a runtime inside the VM, or thousands of tasks) are
	// left out of the demo.
	Slow bool
	// Timeout bounds a boot; Env.Timeout when zero.
	Timeout time.Duration
}

// Variant is one boot of a scenario.
type Variant struct {
	Name  string // "without", "with-hook", "with-shim", …
	Setup func(g *Guest) error
	Check func(r *Run) error
	// Drive, when set, makes the boot a cluster boot (cluster.go): a control
	// plane on the host, the VM's kubelet registered with it, the network
	// up; Drive runs on the host while the VM runs, and the boot ends when
	// it returns. The scenario's Script is then clusterScript.
	Drive func(ctx context.Context, c *Cluster) error
	// Kernel names the kernel it boots (Kernels): KernelNewest when empty.
	Kernel string
}

// Paths inside the VM.
const (
	GuestBin    = "/oomguard/bin"
	GuestConfig = "/oomguard/config.toml"
	GuestHook   = GuestBin + "/oomguard-hook"
	GuestShim   = "/.oomguard/oomguard-init" // inside a container's rootfs
)

// Env is what every boot needs: the kernels and the binaries make built.
type Env struct {
	Kernel     string // KernelNewest's vmlinuz
	BinDir     string // bin/: oomguard-hook, oomguard-init, oomguard-nri, oomguard-doctor (make build)
	TestBinDir string // build/test-bin: guest (make test-bins)
	BuildDir   string // build/: the release image (make image) and the real components (make components)
	RepoDir    string
	WorkDir    string
	Timeout    time.Duration
	// Log receives what runs on the host beside the VM: NRI's runtime side and
	// the plugins it starts. The console of each boot is in its Run.
	Log io.Writer

	kernelMu sync.Mutex
	kernels  map[string]string // name: vmlinuz, fetched on first use
}

// KernelPath is the vmlinuz of the kernel named name (Kernels; "" is
// KernelNewest), fetched into BuildDir/vm/kernel on first use.
func (e *Env) KernelPath(name string) (string, error) {
	if name == "" {
		name = KernelNewest.Name
	}
	i := slices.IndexFunc(Kernels, func(k Kernel) bool { return k.Name == name })
	if i < 0 {
		return "", fmt.Errorf("no kernel %q: the VM tier boots %v", name, Kernels)
	}
	e.kernelMu.Lock()
	defer e.kernelMu.Unlock()
	if p, ok := e.kernels[name]; ok {
		return p, nil
	}
	p, err := EnsureKernel(filepath.Join(e.BuildDir, "vm", "kernel"), Kernels[i])
	if err != nil {
		return "", fmt.Errorf("kernel %s: %w", name, err)
	}
	if e.kernels == nil {
		e.kernels = map[string]string{}
	}
	e.kernels[name] = p
	return p, nil
}

// Programs and test binaries every boot may use.
var (
	programs     = []string{"oomguard-hook", "oomguard-init", "oomguard-nri", "oomguard-doctor"}
	testBinaries = []string{"guest", "agent", "nrirun", "nriother"}
)

// NewEnv fetches the newest kernel into buildDir/vm/kernel (another on
// first use) and finds the binaries make built: it builds nothing itself,
// so a test's time goes to the VMs.
func NewEnv(repoDir, buildDir string) (*Env, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if err := runcbundle.Available(); err != nil {
		return nil, err
	}
	e := &Env{BinDir: filepath.Join(repoDir, "bin"), TestBinDir: filepath.Join(buildDir, "test-bin"),
		BuildDir: buildDir, RepoDir: repoDir,
		WorkDir: filepath.Join(buildDir, "vm", "work"), Timeout: 3 * time.Minute, Log: os.Stderr}
	var err error
	if e.Kernel, err = e.KernelPath(""); err != nil {
		return nil, err
	}
	for _, name := range programs {
		if _, err := os.Stat(filepath.Join(e.BinDir, name)); err != nil {
			return nil, fmt.Errorf("%s is missing: run make build", filepath.Join(e.BinDir, name))
		}
	}
	for _, name := range testBinaries {
		if _, err := os.Stat(filepath.Join(e.TestBinDir, name)); err != nil {
			return nil, fmt.Errorf("%s is missing: run make test-bins", filepath.Join(e.TestBinDir, name))
		}
	}
	return e, os.MkdirAll(e.WorkDir, 0o755)
}

// Guest is the VM's filesystem being assembled for one boot.
type Guest struct {
	env     *Env
	kernel  string // the vmlinuz it boots
	a       *archive
	dir     string // host scratch space for bundles
	bundles map[string]*runcbundle.Bundle
	images  []string // "/images/ARCHIVE REF" lines of /images/index
}

// Bundle makes a busybox container bundle that the VM finds at /bundles/NAME.
func (g *Guest) Bundle(name string, args ...string) (*runcbundle.Bundle, error) {
	b, err := runcbundle.New(filepath.Join(g.dir, name), args...)
	if err != nil {
		return nil, err
	}
	g.bundles[name] = b
	return b, nil
}

// File puts data at path in the VM.
func (g *Guest) File(path string, data []byte, perm uint32) { g.a.file(path, data, perm) }

// ShippedConfig is the shipped configuration, verifying every interval, with
// a launched plugin logging where report shows it.
func ShippedConfig(repo, interval string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "config.toml"))
	if err != nil {
		return nil, err
	}
	s := strings.Replace(string(b), `verify_interval = "60s"`, `verify_interval = "`+interval+`"`, 1)
	return []byte(strings.Replace(s, `log_file = "syslog"`, `log_file = "/tmp/plugin.log"`, 1)), nil
}

// CopyFile puts the host file src at path in the VM.
func (g *Guest) CopyFile(path, src string) error { return g.a.copyFile(path, src) }

// CopyWithLibs puts the dynamically linked host binary src at path in the
// VM, with the shared libraries it needs at their host paths.
func (g *Guest) CopyWithLibs(path, src string) error {
	if err := g.a.copyFile(path, src); err != nil {
		return err
	}
	libs, err := sharedLibs(src)
	if err != nil {
		return err
	}
	for _, l := range libs {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return err
		}
		if err := g.a.copyFile(l, real); err != nil {
			return err
		}
	}
	return nil
}

// Bin is the host path of one of oomguard's programs or the test binaries.
func (g *Guest) Bin(name string) string {
	if slices.Contains(testBinaries, name) {
		return filepath.Join(g.env.TestBinDir, name)
	}
	return filepath.Join(g.env.BinDir, name)
}

// Kill is one process the OOM killer killed, from the kernel log.
type Kill struct {
	Pid    int
	Comm   string
	Adj    int
	Memcg  bool // a memory cgroup OOM, not a global one
	Reason string
}

// Run is what a boot showed.
type Run struct {
	Scenario, Variant string
	Console           string
	Results           []map[string]string
	Killed            []Kill
	Elapsed           time.Duration
	// Notes are what a check measured, for the test's log.
	Notes []string
	// Figures are what a cluster boot's drive measured, for the bench.
	Figures map[string]time.Duration
}

// Result returns the first @@RESULT line that has key, or nil.
func (r *Run) Result(key string) map[string]string {
	for _, m := range r.Results {
		if _, ok := m[key]; ok {
			return m
		}
	}
	return nil
}

// KilledComms lists the killed processes' names in order.
func (r *Run) KilledComms() []string {
	var out []string
	for _, k := range r.Killed {
		out = append(out, k.Comm)
	}
	return out
}

// Boot runs one variant of a scenario in a fresh VM; a cluster boot's drive
// runs its steps through steps (nil: RunAll).
func (e *Env) Boot(ctx context.Context, s Scenario, v Variant, steps Stepper) (*Run, error) {
	dir, err := os.MkdirTemp(e.WorkDir, s.Name+"-"+v.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	kernel, err := e.KernelPath(v.Kernel)
	if err != nil {
		return nil, err
	}
	g := &Guest{env: e, kernel: kernel, a: newArchive(), dir: dir, bundles: map[string]*runcbundle.Bundle{}}
	if v.Drive != nil {
		s.Script = clusterScript
	}
	if err := e.base(g, s); err != nil {
		return nil, err
	}
	var cb *clusterBoot
	if v.Drive != nil {
		if cb, err = e.startCluster(ctx, dir, g); err != nil {
			return nil, err
		}
		defer cb.cp.Stop()
	}
	if v.Setup != nil {
		if err := v.Setup(g); err != nil {
			return nil, fmt.Errorf("set up %s/%s: %w", s.Name, v.Name, err)
		}
	}
	for name, b := range g.bundles {
		if err := b.Save(); err != nil {
			return nil, err
		}
		if err := g.a.copyTree("/bundles/"+name, b.Dir); err != nil {
			return nil, err
		}
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	f, err := os.Create(initrd)
	if err != nil {
		return nil, err
	}
	if err := g.a.writeTo(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("write initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if cb != nil {
		cb.steps = steps
		if steps == nil {
			cb.steps = RunAll
		}
	}
	return e.boot(ctx, s, v, kernel, initrd, cb, dir)
}

func (e *Env) boot(ctx context.Context, s Scenario, v Variant, kernel, initrd string, cb *clusterBoot, dir string) (*Run, error) {
	timeout := e.Timeout
	if s.Timeout > 0 {
		timeout = s.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	mem := s.MemoryMB
	if mem == 0 {
		mem = 256
	}
	cmdline := "console=ttyS0 quiet loglevel=1 panic=-1 log_buf_len=1M oomguard.variant=" + v.Name
	args := []string{"-nodefaults", "-no-user-config", "-display", "none",
		"-serial", "stdio", "-monitor", "none", "-no-reboot", "-m", strconv.Itoa(mem), "-smp", "1",
		"-kernel", kernel, "-initrd", initrd, "-append", cmdline}
	if cb != nil {
		return e.drive(ctx, s, v, cb, dir, args)
	}
	cmd := exec.CommandContext(ctx, QEMU, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	run := ParseConsole(out.String())
	run.Scenario, run.Variant, run.Elapsed = s.Name, v.Name, time.Since(start)
	if ctx.Err() != nil {
		return run, fmt.Errorf("%s/%s: the VM did not finish within %s; console:\n%s", s.Name, v.Name, timeout, run.Console)
	}
	if err != nil {
		return run, fmt.Errorf("%s/%s: qemu: %v; console:\n%s", s.Name, v.Name, err, run.Console)
	}
	if !strings.Contains(run.Console, "@@DONE") {
		return run, fmt.Errorf("%s/%s: the scenario did not complete; console:\n%s", s.Name, v.Name, run.Console)
	}
	return run, nil
}

var killRE = regexp.MustCompile(`(Memory cgroup out of memory|Out of memory[^:]*): Killed process (\d+) \(([^)]*)\).*oom_score_adj:(-?\d+)`)

func ParseConsole(console string) *Run {
	r := &Run{Console: console}
	sc := bufio.NewScanner(strings.NewReader(console))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if i := strings.Index(line, "@@RESULT "); i >= 0 {
			m := map[string]string{}
			for _, f := range strings.Fields(line[i+len("@@RESULT "):]) {
				k, v, _ := strings.Cut(f, "=")
				m[k] = v
			}
			r.Results = append(r.Results, m)
		}
		if strings.Contains(line, "@@DMESG ") {
			if m := killRE.FindStringSubmatch(line); m != nil {
				pid, _ := strconv.Atoi(m[2])
				adj, _ := strconv.Atoi(m[4])
				r.Killed = append(r.Killed, Kill{Pid: pid, Comm: m[3], Adj: adj, Memcg: strings.HasPrefix(m[1], "Memory cgroup"), Reason: m[1]})
			}
		}
	}
	return r
}

// base is what every boot has: busybox, runc and its libraries, oomguard's
// binaries and configuration, /init and the scenario.
func (e *Env) base(g *Guest, s Scenario) error {
	a := g.a
	if err := a.copyFile("/bin/busybox", runcbundle.Busybox); err != nil {
		return err
	}
	applets, err := exec.Command(runcbundle.Busybox, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("busybox --list-full: %w", err)
	}
	for _, p := range strings.Fields(string(applets)) {
		if p != "bin/busybox" {
			a.symlink("/"+p, "/bin/busybox")
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return err
	}
	if err := g.CopyWithLibs("/usr/sbin/runc", runc); err != nil {
		return err
	}
	for _, name := range []string{"oomguard-hook", "oomguard-init", "oomguard-doctor"} {
		if err := a.copyFile(GuestBin+"/"+name, g.Bin(name)); err != nil {
			return err
		}
	}
	cfg, err := ShippedConfig(e.RepoDir, "60s")
	if err != nil {
		return err
	}
	for _, p := range []string{GuestConfig, "/etc/oomguard/config.toml"} {
		a.file(p, cfg, 0o644)
	}
	for _, d := range []string{"/proc", "/sys", "/dev", "/run", "/tmp", "/var/log", "/etc"} {
		a.mkdirAll(d)
	}
	a.file("/init", []byte(initScript), 0o755)
	a.file("/lib/oomguard-vm.sh", []byte(libScript), 0o644)
	a.file("/scenario.sh", []byte(s.Script), 0o644)
	return nil
}

var lddRE = regexp.MustCompile(`(/[^\s]+) \(0x`)

func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		// A static binary: ldd says so and exits non-zero.
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, m := range lddRE.FindAllStringSubmatch(string(out), -1) {
		libs = append(libs, m[1])
	}
	if len(libs) == 0 {
		return nil, errors.New("ldd found no libraries for " + bin)
	}
	return libs, nil
}

// initScript is the VM's PID 1: it mounts cgroup v2 with the memory
// controller, makes itself unkillable, runs the scenario and powers off.
const initScript = `#!/bin/sh
export PATH=/usr/local/bin:/oomguard/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
# The root filesystem (the initramfs, in RAM) may fill most of it, not half.
mount -o remount,size=80% / 2>/dev/null
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control; done
echo -1000 > /proc/self/oom_score_adj
dmesg -n 1
VARIANT=$(sed -n 's/.*oomguard\.variant=\([^ ]*\).*/\1/p' /proc/cmdline)
export VARIANT
echo "@@BOOTED kernel=$(uname -r) cgroupfs=$(awk '$2 == "/sys/fs/cgroup" {print $3}' /proc/mounts) variant=$VARIANT"
( . /lib/oomguard-vm.sh; . /scenario.sh )
echo "@@DONE status=$?"
poweroff -f
`

// libScript holds the helpers every scenario uses.
const libScript = `# run_pod NAME: run /bundles/NAME with runc to completion (through NRI
# with oomguard-nri when the bundle says so), print what it printed, and
# report its exit status as @@RESULT pod_exit=N.
run_pod() {
	if [ -f /bundles/$1/nri ]; then
		nrirun --bundle /bundles/$1 --id $1 >/tmp/$1.out 2>/tmp/$1.err
	else
		runc --root /run/runc run --no-pivot -b /bundles/$1 $1 >/tmp/$1.out 2>/tmp/$1.err
	fi
	code=$?
	cat /tmp/$1.out
	sed 's/^/@@STDERR /' /tmp/$1.err
	echo "@@RESULT pod_exit=$code"
}

# start_pod NAME: start /bundles/NAME in the background (runc run -d).
start_pod() {
	runc --root /run/runc run -d --no-pivot -b /bundles/$1 $1 </dev/null >/tmp/$1.out 2>&1 || sed 's/^/@@STDERR /' /tmp/$1.out
}

# doctor: run oomguard-doctor, show its report, and report each check's
# severity as @@RESULT check=NAME severity=N (0 ok … 4 critical).
doctor() {
	/oomguard/bin/oomguard-doctor --sample 0 "$@" | sed 's/^/@@DOCTOR /'
	/oomguard/bin/oomguard-doctor --sample 0 --prometheus "$@" |
		sed -n 's/^oomguard_doctor_severity{check="\([^"]*\)"} \([0-9]\)$/@@RESULT check=\1 severity=\2/p'
}

# start_containerd: run containerd (restartable) and wait for its socket.
start_containerd() {
	mkdir -p /var/lib/containerd /run/containerd /var/log/pods
	rm -f /run/containerd/containerd.sock
	containerd --config /etc/containerd/config.toml >>/tmp/containerd.log 2>&1 &
	echo $! > /run/containerd.pid
	wait_socket /run/containerd/containerd.sock 60 containerd /tmp/containerd.log CONTAINERD
}

# wait_socket SOCKET SECONDS NAME LOG TAG: until the runtime NAME listens on
# SOCKET and its CRI answers; if it does not, the tail of its LOG as @@TAG.
wait_socket() {
	i=0
	while [ ! -S $1 ] && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i+1)); done
	[ -S $1 ] || { echo "@@RESULT $3=failed"; tail -30 $4 | sed "s/^/@@$5 /"; }
	kubeletish wait-ready
}

stop_containerd() {
	kill -9 $(cat /run/containerd.pid)
	sleep 0.5
}

# start_plugin: oomguard-nri as an external process (the DaemonSet's way);
# waits until it has synchronized once more than before.
start_plugin() {
	before=$(synced_count)
	oomguard-nri >>/tmp/plugin.log 2>&1 &
	echo $! > /run/plugin.pid
	wait_synced $before
}

# synced_count: how often the plugin has synchronized (0 before it logged).
synced_count() {
	cat /tmp/plugin.log 2>/dev/null | grep -c "msg=synchronized"
}

# wait_synced N: until the plugin's log shows more than N synchronizations.
wait_synced() {
	i=0
	while [ "$(synced_count)" -le "${1:-0}" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
	[ $i -lt 600 ] || { echo "@@RESULT plugin=not-synchronized"; tail -20 /tmp/plugin.log | sed 's/^/@@PLUGIN /'; }
}

# The node's runtime, when the scenario has one (WithRuntime): its name and CRI socket.
RUNTIME=$(sed -n 1p /etc/oomguard-vm/runtime 2>/dev/null)
export CONTAINERD_ADDRESS=$(sed -n 2p /etc/oomguard-vm/runtime 2>/dev/null)

# start_runtime: start the node's runtime (containerd or CRI-O) with the
# pause and workload images in its store, and wait for its CRI.
start_runtime() {
	case $RUNTIME in
	containerd)
		start_containerd
		[ -f /run/images-imported ] || kubeletish import /images/*.tar >/dev/null && touch /run/images-imported
		;;
	crio)
		mkdir -p /var/lib/containers/storage /run/containers/storage /run/crio /var/log/crio /etc/crio/crio.conf.d
		if [ ! -f /run/images-imported ]; then
			while read f ref; do
				copyimg --root /var/lib/containers/storage --runroot /run/containers/storage --storage-driver vfs \
					--signature-policy /etc/containers/policy.json --image-name "$ref" --import-from "oci-archive:$f" >>/tmp/copyimg.log 2>&1 ||
					{ echo "@@RESULT import=failed"; tail -5 /tmp/copyimg.log | sed 's/^/@@CRIO /'; }
			done < /images/index
			touch /run/images-imported
		fi
		rm -f /run/crio/crio.sock
		crio --config /etc/crio/crio.conf >>/tmp/crio.log 2>&1 &
		echo $! > /run/crio.pid
		wait_socket /run/crio/crio.sock 90 crio /tmp/crio.log CRIO
		;;
	esac
}

# restart_runtime: stop the runtime as systemd does (SIGTERM, its
# containers left running) and start it again.
restart_runtime() {
	pid=$(cat /run/$RUNTIME.pid)
	kill $pid
	i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
	start_runtime
}

# start_kubelet: a real kubelet on the node's runtime: registered with the
# cluster's API server when the boot has one, else standalone.
start_kubelet() {
	if [ -f /etc/kubernetes/kubelet.conf ]; then
		set -- --kubeconfig /etc/kubernetes/kubelet.conf --node-ip 10.0.2.15
	else
		set -- --node-ip 127.0.0.1
	fi
	kubelet --config /etc/kubernetes/kubelet.yaml "$@" --hostname-override node --v 1 >>/tmp/kubelet.log 2>&1 &
	echo $! > /run/kubelet.pid
}

# net_up: the virtio card on QEMU's user network, where the build host is 10.0.2.2.
net_up() {
	for m in $(cat /lib/modules/oomguard/order); do
		insmod /lib/modules/oomguard/$m || echo "@@RESULT insmod=$m failed"
	done
	ip link set lo up
	ip link set eth0 up
	ip addr add 10.0.2.15/24 dev eth0
	ip route add default via 10.0.2.2
}

# add_pod NAME: give kubelet the static pod /pods/NAME.yaml, noting when.
add_pod() {
	echo "@@RESULT added=$1 at_ns=$(kubeletish now)"
	# Renamed into place: kubelet reads a file it is told of at once.
	cp /pods/$1.yaml /etc/kubernetes/.$1.yaml && mv /etc/kubernetes/.$1.yaml /etc/kubernetes/manifests/$1.yaml
}

# wait_pod NAME [running|exited] [--container C]: until kubelet's pod NAME has its container
# in that state (5 minutes at most: seven pods start at once on one slow
# core); kubeletish records it for inspect and exec.
# A pod that never gets there ends the boot, with the logs.
wait_pod() {
	kubeletish pod $1 --until ${2:-running} --timeout 300s $3 && return
	grep -v "^I\|NodeIP can't be loopback" /tmp/kubelet.log | tail -40 | sed 's/^/@@KUBELET /'
	grep "$1" /tmp/kubelet.log | tail -20 | sed 's/^/@@KUBELET /'
	head -3 /proc/meminfo | sed 's/^/@@MEMINFO /'
	ps -o pid,comm,rss 2>/dev/null | sort -k3 -n | tail -8 | sed 's/^/@@PS /'
	report
	exit 1
}

# pid_of CMDLINE: the pid of a process whose command line is exactly CMDLINE
# (busybox-static has no pgrep).
pid_of() {
	for d in /proc/[0-9]*; do
		[ "$( { tr '\0' ' ' < $d/cmdline; } 2>/dev/null)" = "$1 " ] && { echo ${d#/proc/}; return 0; }
	done
	return 1
}

# pod_log NAME: what kubelet's static pod NAME printed (its CRI log).
pod_log() {
	for f in /var/log/pods/*_$1-node_*/*/*.log; do
		[ -f "$f" ] && sed -n 's/^[^ ]* std[a-z]* [FP] //p' "$f"
	done
}

# report: the kernel's OOM kills and the hook's log, for the harness.
report() {
	dmesg | grep -E "Killed process|going to be killed" | sed 's/^/@@DMESG /'
	[ -f /var/log/oomguard-hook.log ] && sed 's/^/@@HOOKLOG /' /var/log/oomguard-hook.log
	[ -f /tmp/plugin.log ] && sed 's/^/@@PLUGIN /' /tmp/plugin.log
	[ -f /tmp/containerd.log ] && grep -i "oomguard\|nri\|error" /tmp/containerd.log | tail -40 | sed 's/^/@@CONTAINERD /'
	[ -f /tmp/crio.log ] && grep -i "oomguard\|nri\|error" /tmp/crio.log | tail -40 | sed 's/^/@@CRIO /'
	true
}

# start_daemons NAME...: node daemons at oom_score_adj 0 holding 8 MiB each.
start_daemons() {
	for d in "$@"; do
		/daemons/$d 8 &
		echo $! > /run/$d.pid
	done
	sleep 1
}

# check_daemons NAME...: @@RESULT daemon=NAME state=alive|dead for each.
check_daemons() {
	for d in "$@"; do
		if kill -0 $(cat /run/$d.pid) 2>/dev/null; then s=alive; else s=dead; fi
		echo "@@RESULT daemon=$d state=$s"
	done
}
`

// Env is the environment the guest is assembled in.
func (g *Guest) Env() *Env { return g.env }
