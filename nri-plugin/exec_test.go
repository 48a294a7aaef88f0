package nriplugin

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/execwatch"
	"github.com/oomguard/oomguard/test/nriruntime"
)

func noExecs() (execSource, error) { return nil, errors.New("not in tests") }

// fakeExecs hands out batches of pids, then ends.
type fakeExecs struct {
	batches [][]int
	errs    []error
}

func (f *fakeExecs) Read(pids []int) ([]int, error) {
	if len(f.batches) == 0 {
		return pids, errors.New("closed")
	}
	b, err := f.batches[0], f.errs[0]
	f.batches, f.errs = f.batches[1:], f.errs[1:]
	return append(pids, b...), err
}
func (f *fakeExecs) Close() error { return nil }

// A process exec'd into a guarded container starts at its spec's score
// (kubelet's): it is set to the rule's when it execs, and only there.
func TestExecdProcessSet(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	other := nriruntime.KubeletContainer(pod, "sidecar", -997, "/app")
	root := fixtureNode(t, []*api.Container{guarded, other}, 1) // 1001 in main, 1002 in sidecar
	cg := mustResolve(t, guarded.Linux.CgroupsPath)
	// 1003 exec'd into main (below it, as in a systemd's child cgroup), 1004 on the host.
	for pid, c := range map[string]string{"1003": cg + "/init.scope", "1004": "/system.slice/sshd.service"} {
		os.MkdirAll(filepath.Join(root, "proc", pid), 0o755)
		os.WriteFile(filepath.Join(root, "proc", pid, "cgroup"), []byte("0::"+c+"\n"), 0o644)
		os.WriteFile(filepath.Join(root, "proc", pid, "oom_score_adj"), []byte("-997\n"), 0o644)
	}
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	for _, c := range []*api.Container{guarded, other} {
		if _, _, err := p.CreateContainer(context.Background(), pod, c); err != nil {
			t.Fatal(err)
		}
	}
	src := &fakeExecs{batches: [][]int{{1003, 1004, 99999}, {1002}}, errs: []error{nil, execwatch.ErrLost}}
	p.watchExecs(context.Background(), func() (execSource, error) { return src, nil })
	for pid, want := range map[string]string{"1003": "900\n", "1004": "-997\n", "1002": "-997\n"} {
		if b, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj")); string(b) != want {
			t.Errorf("pid %s: %q, want %q", pid, b, want)
		}
	}
	if n := counted(t, p.m, "oomguard_exec_events_lost_total"); n != 1 {
		t.Errorf("lost events counted %v, want 1", n)
	}
}
