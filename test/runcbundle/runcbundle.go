// Package runcbundle builds OCI bundles with a static busybox rootfs and runs
// them with the real runc, for oomguard's end-to-end tests and its demo.
package runcbundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// Busybox is the static busybox Debian's busybox-static installs.
var Busybox = "/bin/busybox"

// Bundle is a bundle directory and the spec to be saved in it.
type Bundle struct {
	Dir  string
	Spec *specs.Spec
}

// Available says why runc containers cannot run here, or nil when they can.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("runc containers need root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return errors.New("runc is not installed (apt-get install runc)")
	}
	if _, err := os.Stat(Busybox); err != nil {
		return fmt.Errorf("%s is missing (apt-get install busybox-static)", Busybox)
	}
	return nil
}

// New makes a bundle in dir whose rootfs holds busybox and its applets, with
// runc's default spec running args, no terminal, and a cgroupfs path of its own.
func New(dir string, args ...string) (*Bundle, error) {
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp", "etc", "sbin"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := copyFile(Busybox, filepath.Join(rootfs, "bin", "busybox"), 0o755); err != nil {
		return nil, err
	}
	list, err := exec.Command(Busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil && !os.IsExist(err) {
			return nil, err
		}
	}
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %v: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var sp specs.Spec
	if err := json.Unmarshal(data, &sp); err != nil {
		return nil, fmt.Errorf("parse runc's default spec: %w", err)
	}
	sp.Process.Terminal = false
	sp.Process.Args = args
	sp.Process.Env = append(sp.Process.Env, "PATH=/bin:/sbin")
	sp.Root.Readonly = false
	sp.Hostname = "oomguard"
	b := &Bundle{Dir: dir, Spec: &sp}
	b.SetQoS("besteffort")
	return b, nil
}

// SetQoS puts the container in a cgroup where kubelet (cgroupfs driver) puts
// one of a pod of that QoS class: /kubepods[/burstable|/besteffort]/pod<uid>/<name>.
func (b *Bundle) SetQoS(qos string) {
	sum := sha256.Sum256([]byte(b.Dir))
	uid := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	parent := "/kubepods/" + qos
	if qos == "guaranteed" {
		parent = "/kubepods"
	}
	b.Spec.Linux.CgroupsPath = parent + "/pod" + uid + "/" + filepath.Base(b.Dir)
}

// Rootfs is the path of the bundle's root filesystem.
func (b *Bundle) Rootfs() string { return filepath.Join(b.Dir, "rootfs") }

// AddFile writes data at path inside the rootfs.
func (b *Bundle) AddFile(path string, data []byte, mode os.FileMode) error {
	p := filepath.Join(b.Rootfs(), path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

// CopyFile copies a host file into the rootfs at path.
func (b *Bundle) CopyFile(src, path string, mode os.FileMode) error {
	return copyFile(src, filepath.Join(b.Rootfs(), path), mode)
}

// AddHook runs path with args at createRuntime.
func (b *Bundle) AddHook(path string, args ...string) {
	if b.Spec.Hooks == nil {
		b.Spec.Hooks = &specs.Hooks{}
	}
	b.Spec.Hooks.CreateRuntime = append(b.Spec.Hooks.CreateRuntime, specs.Hook{Path: path, Args: append([]string{filepath.Base(path)}, args...)})
}

// SetMemoryLimit puts the container in a memory cgroup of limit bytes, without swap.
func (b *Bundle) SetMemoryLimit(limit int64) {
	if b.Spec.Linux.Resources == nil {
		b.Spec.Linux.Resources = &specs.LinuxResources{}
	}
	b.Spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &limit}
}

// Result is how a container ended.
type Result struct {
	Stdout, Stderr string
	ExitCode       int
}

// Save writes the spec to the bundle's config.json.
func (b *Bundle) Save() error {
	data, err := json.MarshalIndent(b.Spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.Dir, "config.json"), data, 0o644)
}

// Run saves the spec and runs the container to completion with `runc run`,
// keeping runc's state under the bundle so parallel tests do not collide.
func (b *Bundle) Run(ctx context.Context, id string) (Result, error) {
	if err := b.Save(); err != nil {
		return Result{}, err
	}
	state := filepath.Join(b.Dir, "runc-state")
	cmd := exec.CommandContext(ctx, "runc", "--root", state, "run", "--bundle", b.Dir, id)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode, err = ee.ExitCode(), nil
	}
	// Best effort: a container killed by ctx leaves state behind.
	exec.Command("runc", "--root", state, "delete", "--force", id).Run()
	return res, err
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
