//go:build e2e

package nriplugin

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/testbin"
)

// The plugin binary, connected to NRI's runtime side over its socket, sets
// up a runc container on this host as containerd runs it (CreateContainer,
// runc create, StartContainer, runc start): the container's processes read
// the rule's score from inside, and the plugin claimed nothing at creation.
func TestE2ESetUpBeforeRuncStarts(t *testing.T) {
	rt, log := pluginOnRuntime(t, shippedConfig)
	b := initBundle(t, "#!/bin/sh\necho self=$(cat /proc/self/oom_score_adj)\nsh -c 'echo child=$(cat /proc/self/oom_score_adj)'\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code, err := rt.RunBundle(ctx, filepath.Join(b.Dir, "runc-state"), b.Dir, "oomguard-nri-e2e", "ml", &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s\nplugin:\n%s", err, stderr.String(), log.String())
	}
	if code != 0 || !strings.Contains(stdout.String(), "self=900\n") || !strings.Contains(stdout.String(), "child=900\n") {
		t.Fatalf("exit %d stdout %q stderr %q\nplugin:\n%s", code, stdout.String(), stderr.String(), log.String())
	}
	// On this host's cgroup v1 the group is reported, not written.
	if v2 := kernel.DetectMode("/") == kernel.ModeV2; !v2 && !strings.Contains(log.String(), "unsupported on cgroup v1") {
		t.Fatalf("the plugin did not report the group unsupported:\n%s", log.String())
	}
}

// pluginOnRuntime runs the plugin's binary with the configuration at
// config, connected to NRI's runtime side over its socket; what it logs is
// in the buffer.
func pluginOnRuntime(t *testing.T, config string) (*nriruntime.Runtime, *syncbuf.Buffer) {
	t.Helper()
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
	t.Cleanup(rt.Stop)
	log := &syncbuf.Buffer{}
	rt.PluginLog = log
	plugin, err := rt.StartPlugin(bin, "--config", config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plugin.Process.Kill(); plugin.Wait() })
	return rt, log
}

// initBundle is a runc bundle whose /sbin/init is script, at kubelet's
// Burstable score 500 (this host lacks CAP_SYS_RESOURCE for -997).
func initBundle(t *testing.T, script string) *runcbundle.Bundle {
	t.Helper()
	b, err := runcbundle.New(filepath.Join(t.TempDir(), "nri"), "/sbin/init")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddFile("/sbin/init", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	score := 500
	b.Spec.Process.OOMScoreAdj = &score
	b.SetQoS("burstable")
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	return b
}
