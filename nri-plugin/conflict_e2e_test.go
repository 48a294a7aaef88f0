//go:build e2e

package nriplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The plugin binary keeps a runc container on this host at its rule's
// score while a second writer on the host (as koordlet would) sets the
// container's process to 500 again and again: within two verifier
// intervals the plugin reports the conflict, naming the value it found,
// and after the back-off leaves the process at the other writer's value.
func TestE2ESecondWriterLeftAlone(t *testing.T) {
	shipped, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, bytes.Replace(shipped, []byte(`verify_interval = "60s"`), []byte(`verify_interval = "1s"`), 1), 0o644)
	rt, log := pluginOnRuntime(t, cfg)

	b := initBundle(t, "#!/bin/sh\nexec sleep 60\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		_, err := rt.RunBundle(ctx, filepath.Join(b.Dir, "runc-state"), b.Dir, "oomguard-conflict-e2e", "ml", &stdout, &stderr)
		done <- err
	}()
	var adj string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var st struct{ Pid int }
		if out, err := exec.Command("runc", "--root", filepath.Join(b.Dir, "runc-state"), "state", "oomguard-conflict-e2e").Output(); err == nil &&
			json.Unmarshal(out, &st) == nil && st.Pid > 0 {
			adj = filepath.Join("/proc", strconv.Itoa(st.Pid), "oom_score_adj")
			if v, _ := os.ReadFile(adj); strings.TrimSpace(string(v)) == "900" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container never ran at its rule's 900\nplugin:\n%s", log.String())
		}
	}
	read := func() string { v, _ := os.ReadFile(adj); return strings.TrimSpace(string(v)) }
	// The other writer: 500 whenever it finds another value.
	stop := make(chan struct{})
	var wrote atomic.Int32
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if read() != "500" {
					os.WriteFile(adj, []byte("500"), 0o644)
					wrote.Add(1)
				}
			}
		}
	}()
	start := time.Now()
	if !logsWithin(log, `msg="another writer keeps changing the container's oom_score_adj`, 20*time.Second) {
		close(stop)
		t.Fatalf("no conflict reported\nplugin:\n%s", log.String())
	}
	conflict := time.Since(start)
	if !logsWithin(log, `msg="left the container's oom_score_adj to the other writer`, 20*time.Second) {
		close(stop)
		t.Fatalf("not left to the other writer\nplugin:\n%s", log.String())
	}
	close(stop)
	if !strings.Contains(log.String(), "found=500") {
		t.Errorf("the conflict's line does not name the value found:\n%s", log.String())
	}
	// Left alone: several verifier intervals later the other writer's value stands.
	time.Sleep(3 * time.Second)
	if v := read(); v != "500" {
		t.Fatalf("after yielding the plugin set the process to %s\nplugin:\n%s", v, log.String())
	}
	t.Logf("conflict reported %s after the other writer began (verify_interval 1s), yielded after; the other writer wrote %d times", conflict.Round(time.Millisecond), wrote.Load())
	exec.Command("runc", "--root", filepath.Join(b.Dir, "runc-state"), "kill", "oomguard-conflict-e2e", "KILL").Run()
	<-done
}
