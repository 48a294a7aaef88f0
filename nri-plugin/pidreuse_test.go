package nriplugin

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/test/nriruntime"
)

// A runtime that gives no cgroup path leaves the plugin only the pid it saw
// at start. Once that container's init has exited, its pid can be another
// container's process: the verifier must keep to the container it found
// first, never follow the pid into another.
func TestVerifierNeverFollowsAReusedPid(t *testing.T) {
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	podA := nriruntime.KubeletPod("a", "ml", "guaranteed", "runc", nil)
	ctrA := nriruntime.KubeletContainer(podA, "main", -997, "/sbin/init")
	podB := nriruntime.KubeletPod("b", "other", "guaranteed", "runc", nil)
	ctrB := nriruntime.KubeletContainer(podB, "main", -997, "/app")
	root := fixtureNode(t, []*api.Container{ctrA, ctrB}, 1) // pid 1001 in A, 1002 in B
	cgA, cgB := mustResolve(t, ctrA.Linux.CgroupsPath), mustResolve(t, ctrB.Linux.CgroupsPath)
	os.WriteFile(filepath.Join(root, "proc/1/cgroup"), []byte("0::/init.scope\n"), 0o644)
	ctrA.Linux.CgroupsPath = "" // the runtime says nothing

	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: NewMetrics()})
	ctrA.Pid = 1001
	if err := p.StartContainer(context.Background(), podA, ctrA); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(root, p))
		return strings.TrimSpace(string(b))
	}
	if read("proc/1001/oom_score_adj") != "900" || read("sys/fs/cgroup"+cgA+"/memory.oom.group") != "0" {
		t.Fatalf("A was not fixed at start: %s %s", read("proc/1001/oom_score_adj"), read("sys/fs/cgroup"+cgA+"/memory.oom.group"))
	}
	// A's init exits, its cgroup goes; pid 1001 is now a process of B's.
	os.RemoveAll(filepath.Join(root, "sys/fs/cgroup"+cgA))
	os.WriteFile(filepath.Join(root, "proc/1001/cgroup"), []byte("0::"+cgB+"\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc/1001/oom_score_adj"), []byte("-997\n"), 0o644)
	os.WriteFile(filepath.Join(root, "sys/fs/cgroup"+cgB+"/cgroup.procs"), []byte("1001\n1002\n"), 0o644)
	for range 5 {
		p.verifyAll()
	}
	if read("proc/1001/oom_score_adj") != "-997" || read("proc/1002/oom_score_adj") != "-997" || read("sys/fs/cgroup"+cgB+"/memory.oom.group") != "1" {
		t.Fatalf("the verifier followed the reused pid into B: scores %s %s, B's group %s",
			read("proc/1001/oom_score_adj"), read("proc/1002/oom_score_adj"), read("sys/fs/cgroup"+cgB+"/memory.oom.group"))
	}
}

// Synchronize answers at once and fixes the processes after: that work must
// not race the handlers that run meanwhile (go test -race).
func TestSynchronizeRacesNothing(t *testing.T) {
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range 20 {
		pod := nriruntime.KubeletPod(strings.Repeat("p", 1)+string(rune('a'+i)), "ml", "guaranteed", "runc", nil)
		pods, ctrs = append(pods, pod), append(ctrs, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	}
	root := fixtureNode(t, ctrs, 2)
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: NewMetrics()})
	for range 5 {
		if _, err := p.Synchronize(context.Background(), pods, ctrs); err != nil {
			t.Fatal(err)
		}
		for i, ctr := range ctrs {
			p.StartContainer(context.Background(), pods[i], ctr)
			p.RemoveContainer(context.Background(), pods[i], ctr)
		}
	}
	p.waitBackground()
}
