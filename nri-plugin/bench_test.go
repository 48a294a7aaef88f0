package nriplugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/execwatch"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/test/nriruntime"
)

// BenchmarkStartContainerHandler is the plugin's own work per container,
// without the NRI transport, logging as the DaemonSet does.
func BenchmarkStartContainerHandler(b *testing.B) {
	cfg, err := config.Load(shippedConfig)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		w    io.Writer
	}{{"discard", io.Discard}, {"devnull", devNull(b)}} {
		b.Run(tc.name, func(b *testing.B) {
			p := New(Options{Config: cfg, Root: b.TempDir(), Log: slog.New(slog.NewTextHandler(tc.w, nil)), Metrics: NewMetrics()})
			pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
			ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
			b.ReportAllocs()
			for b.Loop() {
				if err := p.StartContainer(context.Background(), pod, ctr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func devNull(b *testing.B) io.Writer {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkStartContainerWrites is the plugin's own work per container
// where its writes happen: a fixture tree in memory (tmpfs) made like a
// node's, each container new, its init at kubelet's score.
func BenchmarkStartContainerWrites(b *testing.B) {
	cfg, err := config.Load(shippedConfig)
	if err != nil {
		b.Fatal(err)
	}
	root, err := os.MkdirTemp("/dev/shm", "oomguard-bench")
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	const n = 4096
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range n {
		pod := nriruntime.KubeletPod(fmt.Sprint(i), "ml", "burstable", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", 500, "/sbin/init")
		ctr.Pid = uint32(100000 + i)
		cg := mustResolve(b, ctr.Linux.CgroupsPath)
		for p, c := range map[string]string{
			"sys/fs/cgroup" + cg + "/memory.oom.group":    "1\n",
			"sys/fs/cgroup" + cg + "/cgroup.procs":        fmt.Sprint(ctr.Pid),
			fmt.Sprintf("proc/%d/cgroup", ctr.Pid):        "0::" + cg + "\n",
			fmt.Sprintf("proc/%d/oom_score_adj", ctr.Pid): "500\n",
			"sys/fs/cgroup/cgroup.controllers":            "memory",
		} {
			os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
			os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
		}
		pods, ctrs = append(pods, pod), append(ctrs, ctr)
	}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.NewTextHandler(devNull(b), nil)), Metrics: NewMetrics()})
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if err := p.StartContainer(context.Background(), pods[i%n], ctrs[i%n]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkStartContainerHost is the plugin's own work per container on
// this host's cgroup v2 tree (root only): a real cgroup and process each,
// the writes on the kernel's files, the exec filter told of each.
func BenchmarkStartContainerHost(b *testing.B) {
	if os.Geteuid() != 0 || kernel.DetectMode("/") != kernel.ModeV2 {
		b.Skip("needs root on a cgroup v2 host")
	}
	cfg, err := config.Load(shippedConfig)
	if err != nil {
		b.Fatal(err)
	}
	sleeper := exec.Command("sleep", "3600")
	if err := sleeper.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	p := New(Options{Config: cfg, Root: "/", Log: slog.New(slog.NewTextHandler(devNull(b), nil)), Metrics: NewMetrics()})
	if f, err := execwatch.OpenFiltered(); err == nil {
		var filter cgroupFilter = f
		p.scored.filter.Store(&filter)
		b.Cleanup(func() { f.Close() })
	}
	var made []string
	b.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			for d := made[i]; d != "/sys/fs/cgroup"; d = filepath.Dir(d) {
				os.Remove(d)
			}
		}
	})
	pid := sleeper.Process.Pid
	i := 0
	for b.Loop() {
		b.StopTimer()
		pod := nriruntime.KubeletPod(fmt.Sprintf("host%d", i), "ml", "burstable", "runc", nil)
		ctr := nriruntime.KubeletContainer(pod, "main", 500, "/sbin/init")
		ctr.Pid = uint32(pid)
		cg := filepath.Join("/sys/fs/cgroup", mustResolve(b, ctr.Linux.CgroupsPath))
		if err := os.MkdirAll(cg, 0o755); err != nil {
			b.Fatal(err)
		}
		var up []string
		for d := filepath.Dir(cg); d != "/sys/fs"; d = filepath.Dir(d) {
			up = append(up, d)
		}
		for j := len(up) - 1; j >= 0; j-- { // kubelet's controllers, from the root down
			os.WriteFile(filepath.Join(up[j], "cgroup.subtree_control"), []byte("+memory +pids"), 0)
		}
		made = append(made, cg)
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(cg, "memory.oom.group"), []byte("1"), 0)
		os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte("500"), 0)
		b.StartTimer()
		if err := p.StartContainer(context.Background(), pod, ctr); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	if s, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid)); string(s) != "900\n" {
		b.Fatalf("the last container's init at %q", s)
	}
}
