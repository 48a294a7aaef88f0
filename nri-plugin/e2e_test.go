//go:build e2e

package nriplugin

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/testbin"
)

// The plugin binary, connected to NRI's runtime side over its socket, makes
// the adjustment; NRI's generator applies it to the spec as containerd does;
// runc runs the container; the container reads its score from inside.
func TestE2EAdjustedSpecRunsWithRunc(t *testing.T) {
	if err := runcbundle.Available(); err != nil {
		t.Fatal(err)
	}
	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := nriruntime.Start(nriDir(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	plugin, err := rt.StartPlugin(bin, "--config", shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { plugin.Process.Kill(); plugin.Wait() }()

	b, err := runcbundle.New(filepath.Join(t.TempDir(), "nri"), "/sbin/init")
	if err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho self=$(cat /proc/self/oom_score_adj)\nsh -c 'echo child=$(cat /proc/self/oom_score_adj)'\n"
	if err := b.AddFile("/sbin/init", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// kubelet's Burstable score: this host lacks CAP_SYS_RESOURCE for -997.
	pod := nriruntime.KubeletPod("e2e", "ml", "burstable", "runc", nil)
	ctr := nriruntime.KubeletContainer(pod, "main", 500, "/sbin/init")
	rsp, err := rt.Create(pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	score := 500
	b.Spec.Process.OOMScoreAdj = &score
	if err := nriruntime.ApplyAdjustment(b.Spec, rsp.GetAdjust()); err != nil {
		t.Fatal(err)
	}
	// The spec runs as NRI's generator left it: on this host's cgroup v1 the
	// plugin must not have asked for memory.oom.group, which runc refuses there.
	group, asked := b.Spec.Linux.Resources.Unified["memory.oom.group"]
	if v2 := kernel.DetectMode("/") == kernel.ModeV2; (v2 && group != "0") || (!v2 && asked) {
		t.Fatalf("spec memory.oom.group = %q (set %v) on a cgroup %s host", group, asked, kernel.DetectMode("/"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := b.Run(ctx, "oomguard-nri-e2e")
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "self=900\n") || !strings.Contains(res.Stdout, "child=900\n") {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
