package vm

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/test/runcbundle"
)

// GuaranteedScore is kubelet's oom_score_adj for Guaranteed pods.
const GuaranteedScore = -997

// AsKubeletGuaranteed gives a bundle what kubelet asks of the runtime for a
// Guaranteed pod on cgroup v2: score -997 and memory.oom.group = 1, and a
// memory limit when limit > 0.
func AsKubeletGuaranteed(b *runcbundle.Bundle, limit int64) {
	score := GuaranteedScore
	b.Spec.Process.OOMScoreAdj = &score
	b.SetQoS("guaranteed")
	if b.Spec.Linux.Resources == nil {
		b.Spec.Linux.Resources = &specs.LinuxResources{}
	}
	b.Spec.Linux.Resources.Unified = map[string]string{"memory.oom.group": "1"}
	if limit > 0 {
		b.SetMemoryLimit(limit)
	}
}

// WithHook runs oomguard-hook with the shipped configuration at createRuntime.
func WithHook(b *runcbundle.Bundle) { b.AddHook(GuestHook, "--config", GuestConfig) }

// WithFix guards b with the part of oomguard a variant names: "hook", "nri"
// or "shim"; "" (without) leaves it as kubelet made it.
func WithFix(g *Guest, b *runcbundle.Bundle, fix string) error {
	switch fix {
	case "hook":
		WithHook(b)
	case "nri":
		return WithNRI(g, b)
	case "shim":
		return WithShim(g, b)
	case "":
	default:
		return fmt.Errorf("no fix %q", fix)
	}
	return nil
}

// WithShim puts oomguard-init in front of the container's command, as the
// image patcher does.
func WithShim(g *Guest, b *runcbundle.Bundle) error {
	if err := b.CopyFile(g.Bin("oomguard-init"), GuestShim, 0o755); err != nil {
		return err
	}
	b.Spec.Process.Args = append([]string{GuestShim, "--"}, b.Spec.Process.Args...)
	return nil
}

// ExpectKilled fails unless the kernel killed exactly the processes named
// (in any order; a name may repeat).
func ExpectKilled(r *Run, want ...string) error {
	got := r.KilledComms()
	if !slices.Equal(sorted(got), sorted(want)) {
		return fmt.Errorf("the kernel killed %s, want %s", Names(got), Names(want))
	}
	return nil
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func Names(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return "[" + strings.Join(s, " ") + "]"
}

// WithNRI runs the bundle as containerd does with oomguard-nri connected:
// in the VM, nrirun starts the real plugin and runs the bundle through NRI's
// runtime side (CreateContainer, runc create, StartContainer, runc start),
// so the plugin sets the container up on the VM's kernel before it starts.
func WithNRI(g *Guest, b *runcbundle.Bundle) error {
	for _, p := range []struct{ dst, src string }{{GuestBin + "/oomguard-nri", g.Bin("oomguard-nri")}, {"/usr/local/bin/nrirun", g.Bin("nrirun")}} {
		if err := g.CopyFile(p.dst, p.src); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(b.Dir, "nri"), nil, 0o644) // run_pod's cue
}

// WithPatchedImage makes the bundle's rootfs and command from an image that
// imagepatch patched with the built-in shim: the pod image (a static busybox
// with files) is pushed to an in-memory registry, patched there, and the
// result unpacked into the bundle, as a runtime would pull it.
func WithPatchedImage(b *runcbundle.Bundle, files map[string]runcbundle.ImageFile, cmd []string) error {
	img, err := runcbundle.BusyboxImage(files, cmd)
	if err != nil {
		return err
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	src, err := name.NewTag(strings.TrimPrefix(srv.URL, "http://") + "/pods/vm:v1")
	if err != nil {
		return err
	}
	if err := remote.Write(src, img); err != nil {
		return err
	}
	p, err := imagepatch.New(imagepatch.ShimSpec())
	if err != nil {
		return err
	}
	res := p.Apply(context.Background(), src)
	if res.Action != imagepatch.ActionPush {
		return fmt.Errorf("imagepatch: %s %s", res.Action, res.Error)
	}
	dst, err := name.NewTag(res.Destination)
	if err != nil {
		return err
	}
	patched, err := remote.Image(dst)
	if err != nil {
		return err
	}
	return b.UnpackImage(patched)
}

// InitBundle makes the bundle NAME whose PID 1 is the shell script init,
// with the guest workload as /bin/hog when hog is set: a VM-like pod.
func (g *Guest) InitBundle(name, init string, hog bool) (*runcbundle.Bundle, error) {
	b, err := g.Bundle(name, "/sbin/init")
	if err != nil {
		return nil, err
	}
	if err := b.AddFile("/sbin/init", []byte(init), 0o755); err != nil {
		return nil, err
	}
	if hog {
		if err := b.CopyFile(g.Bin("guest"), "/bin/hog", 0o755); err != nil {
			return nil, err
		}
	}
	return b, nil
}
