//go:build e2e

package hook_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/install"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/testbin"
)

// podmanImage is a VM-like image: its command is /sbin/init.
const podmanImage = "localhost/oomguard/podman-vm:1"

// podmanEnv is Debian's podman on this host with storage of its own, and the
// hook installed the way docs/install-node.md says, into the hooks directory
// podman reads.
type podmanEnv struct {
	dir, cfg, log string
}

// newPodman installs the hook with `oomguard-hook install` on this host (the
// hooks directory podman really reads) and removes it with `uninstall` at
// the end. Root here lacks CAP_SYS_RESOURCE: the ulimits stay below the
// hard limits podman would otherwise raise to.
func newPodman(t *testing.T) *podmanEnv {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("e2e needs podman (make deps): %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the podman e2e installs a hook for the host's podman: run as root")
	}
	if _, err := os.Stat(filepath.Join(install.DefaultHooksDir, install.HookFileName)); err == nil {
		t.Fatalf("%s is already installed on this host; the test would replace it", filepath.Join(install.DefaultHooksDir, install.HookFileName))
	}
	dir, err := os.MkdirTemp("", "ogp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &podmanEnv{dir: dir, cfg: filepath.Join(dir, "config.toml"), log: filepath.Join(dir, "hook.log")}
	cfg, err := testbin.ShippedConfig(p.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.cfg, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := runcbundle.BusyboxImage(map[string]runcbundle.ImageFile{
		"/sbin/init": {Data: []byte("#!/bin/sh\nexec sleep 2147483647\n"), Mode: 0o755},
	}, []string{"/sbin/init"})
	if err != nil {
		t.Fatal(err)
	}
	if err := runcbundle.WriteOCIArchive(filepath.Join(dir, "img.tar"), podmanImage, img); err != nil {
		t.Fatal(err)
	}
	if out, err := p.podman("load", "-i", filepath.Join(dir, "img.tar")); err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	t.Cleanup(func() { p.podman("rm", "-af", "-t", "0") })
	return p
}

func (p *podmanEnv) podman(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--root", p.dir + "/storage", "--runroot", p.dir + "/run", "--storage-driver", "vfs",
		"--cgroup-manager", "cgroupfs", "--events-backend", "none"}
	cmd := exec.CommandContext(ctx, "podman", append(base, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// hookCmd runs the built oomguard-hook with args.
func hookCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(hookBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("oomguard-hook %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (p *podmanEnv) install(t *testing.T) {
	t.Helper()
	hookCmd(t, "install", "--hook-path", hookBin, "--config", p.cfg)
	t.Cleanup(func() { hookCmd(t, "uninstall") })
}

// Podman runs VM-like containers at 0 unless the hook, installed as
// docs/install-node.md says, is in the directory podman reads; `podman run --init` puts
// /run/podman-init first, and the command rule still sees /sbin/init.
func TestE2EPodmanHook(t *testing.T) {
	p := newPodman(t)
	if out, err := p.podmanInit(t, "runc", "--entrypoint", "/sbin/init"); err != nil || out != "0" {
		t.Fatalf("without the hook: %q, %v; want podman's 0", out, err)
	}
	p.install(t)
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"init", nil},
		{"podman run --init", []string{"--init"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The container's command is the image's /sbin/init; the shell
			// that reads the score runs as its child.
			args := append([]string{"--entrypoint", "/sbin/init"}, tc.extra...)
			out, err := p.podmanInit(t, "runc", args...)
			if err != nil || out != "900" {
				log, _ := os.ReadFile(p.log)
				t.Fatalf("with the hook: %q, %v; want the init-as-pid1 rule's 900\nhook log:\n%s", out, err, log)
			}
		})
	}
	hookCmd(t, "uninstall")
	if _, err := os.Stat(filepath.Join(install.DefaultHooksDir, install.HookFileName)); !os.IsNotExist(err) {
		t.Fatalf("uninstall left the hook file: %v", err)
	}
	if out, err := p.podmanInit(t, "runc", "--entrypoint", "/sbin/init"); err != nil || out != "0" {
		t.Fatalf("after uninstall: %q, %v; want podman's 0 again", out, err)
	}
}

// podmanInit starts a detached container whose command is its /sbin/init,
// and reads the score of the container's init wherever the wrapper put it.
func (p *podmanEnv) podmanInit(t *testing.T, runtime string, extra ...string) (string, error) {
	t.Helper()
	name := fmt.Sprintf("vm-%d", time.Now().UnixNano())
	args := append([]string{"run", "-d", "--name", name, "--runtime", runtime, "--network", "none",
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000"}, extra...)
	if out, err := p.podman(append(args, podmanImage)...); err != nil {
		return out, err
	}
	defer p.podman("rm", "-f", "-t", "0", name)
	// The init is the sleep /sbin/init execs into.
	return p.podman("exec", name, "/bin/sh", "-c", "for d in /proc/[0-9]*; do [ \"$(cat $d/comm)\" = sleep ] && cat $d/oom_score_adj && exit; done")
}

// A process `podman exec` starts is not the init's child: it takes the
// spec's score, which a createRuntime hook cannot change (docs/install-node.md, exec).
func TestE2EPodmanExecKeepsSpecScore(t *testing.T) {
	p := newPodman(t)
	p.install(t)
	name := "exec-vm"
	if out, err := p.podman("run", "-d", "--name", name, "--runtime", "runc", "--network", "none",
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000", podmanImage); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	out, err := p.podman("exec", name, "cat", "/proc/self/oom_score_adj")
	if err != nil || out != "0" {
		t.Fatalf("podman exec: %q, %v; want the spec's 0", out, err)
	}
}

// A strict hook that cannot do its job stops the container, and podman shows
// the user why, not only an exit code.
func TestE2EPodmanStrictFailureShowsReason(t *testing.T) {
	p := newPodman(t)
	p.install(t)
	if err := os.WriteFile(p.cfg, []byte("strict = true\n[[rule]]\nname = 'x'\noom_score_adj = 5000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := p.podmanInit(t, "runc", "--entrypoint", "/sbin/init")
	if err == nil {
		t.Fatalf("a strict hook with a broken configuration let the container run: %q", out)
	}
	if !strings.Contains(out, "oom_score_adj") || !strings.Contains(out, p.cfg) {
		t.Fatalf("podman's error does not say what was wrong:\n%s", out)
	}
}
