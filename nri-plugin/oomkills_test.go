package nriplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/oomkills"
	"github.com/oomguard/oomguard/internal/podevents"
	"github.com/oomguard/oomguard/test/nriruntime"
)

func noKmsg(bool) (oomkills.Source, error) { return nil, errors.New("not in tests") }

// from opens src, wherever asked.
func from(src oomkills.Source) func(bool) (oomkills.Source, error) {
	return func(bool) (oomkills.Source, error) { return src, nil }
}

// fakeKmsg hands out records, then ends; before[i] runs before the i-th
// is read (the kernel counting its kills as it logs them).
type fakeKmsg struct {
	recs   []string
	errs   []error
	before map[int]func()
	n      int
}

func (f *fakeKmsg) Read() (kmsg.Record, error) {
	if len(f.recs) == 0 {
		return kmsg.Record{}, errors.New("closed")
	}
	if do := f.before[f.n]; do != nil {
		do()
	}
	f.n++
	s, err := f.recs[0], f.errs[0]
	f.recs, f.errs = f.recs[1:], f.errs[1:]
	if err != nil {
		return kmsg.Record{}, err
	}
	return kmsg.ParseRecord([]byte(s))
}
func (f *fakeKmsg) SetDeadline(time.Time) error { return nil }
func (f *fakeKmsg) Close() error                { return nil }

// kill is the kernel's two lines for one OOM kill.
func kill(seq int, constraint, oomMemcg, taskMemcg, comm string, pid, score int) []string {
	prefix := "Memory cgroup out of memory"
	if constraint == "CONSTRAINT_NONE" {
		prefix = "Out of memory"
	}
	memcg := ",oom_memcg=" + oomMemcg
	if constraint == "CONSTRAINT_NONE" {
		memcg = ",global_oom"
	}
	return []string{
		fmt.Sprintf("6,%d,1000,-;oom-kill:constraint=%s,nodemask=(null),cpuset=x,mems_allowed=0%s,task_memcg=%s,task=%s,pid=%d,uid=0", seq, constraint, memcg, taskMemcg, comm, pid),
		// Each process's memory is its own: its total-vm here.
		fmt.Sprintf("3,%d,1001,-;%s: Killed process %d (%s) total-vm:%dkB, anon-rss:500kB, file-rss:20kB, shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:%d", seq+1, prefix, pid, comm, pid, score),
	}
}

// Every OOM kill the kernel logs is reported: whose process, which kind,
// counted by container (series gone with the container) or as a node
// daemon's; a guarded container's own-limit kill lists its largest processes.
func TestKillsReported(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	guarded := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	other := nriruntime.KubeletContainer(pod, "sidecar", -997, "/app")
	root := fixtureNode(t, []*api.Container{guarded, other}, 1)
	cg, cgOther := mustResolve(t, guarded.Linux.CgroupsPath), mustResolve(t, other.Linux.CgroupsPath)
	podCg := cg[:strings.LastIndexByte(cg, '/')]
	// What the kernel's task list would have said of the container's init.
	for name, data := range map[string]string{"stat": "1001 (init) S 1 1001 1001 0 -1 4194560 0 0 0 0\n", "cmdline": "/sbin/init\x00", "status": "Name:\tinit\nVmRSS:\t   2048 kB\n"} {
		if err := os.WriteFile(filepath.Join(root, "proc", "1001", name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// And a batch job's worker outside the pod, at 500, for the doctor's model.
	os.MkdirAll(filepath.Join(root, "proc", "1005"), 0o755)
	for name, data := range map[string]string{"proc/meminfo": "MemTotal: 4096000 kB\nMemAvailable: 100 kB\nSwapTotal: 0 kB\n",
		"proc/1005/stat": "1005 (worker) S 1 1005 1005 0 -1 4194560 0 0 0 0\n", "proc/1005/cmdline": "worker\x00",
		"proc/1005/status": "Name:\tworker\nVmRSS:\t   4096 kB\n", "proc/1005/oom_score_adj": "500\n", "proc/1005/cgroup": "0::/batch.slice\n"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Parse([]byte(readShipped(t)))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	events := &fakeRecorder{}
	p := New(Options{Config: cfg, Root: root, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics(), Events: events})
	if err := p.StartContainer(context.Background(), pod, guarded); err != nil {
		t.Fatal(err)
	}
	p.waitBackground()
	// The sidecar's memory.events when it started (a new cgroup counts
	// none); the node's count of kills (/proc/vmstat) as the plugin
	// starts, then as the kernel logs them.
	memEvents := filepath.Join(root, "sys/fs/cgroup", cgOther, "memory.events")
	if err := os.WriteFile(memEvents, []byte("oom 0\noom_kill 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vmstat := func(n int) func() {
		return func() {
			os.WriteFile(filepath.Join(root, "proc/vmstat"), fmt.Appendf(nil, "pgfault 9\noom_kill %d\n", n), 0o644)
		}
	}
	vmstat(40)()
	if err := p.StartContainer(context.Background(), pod, other); err != nil {
		t.Fatal(err)
	}
	p.waitBackground()
	// Six kills since in the sidecar: 1002, 1008, 1007, 1008 again (the
	// kernel counts the victim twice when it kills its group), 1007 again
	// through its thread 1010 (still in /proc), named, one (1003) not.
	if err := os.MkdirAll(filepath.Join(root, "proc/1007/task/1010"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(memEvents, []byte("oom 6\noom_kill 6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var recs []string
	recs = append(recs, kill(1, "CONSTRAINT_MEMCG", cg, cg+"/init.scope", "python3", 1001, 900)...)
	recs = append(recs, kill(3, "CONSTRAINT_MEMCG", podCg, cgOther, "app", 1002, -997)...)
	recs = append(recs, kill(5, "CONSTRAINT_NONE", "", "/system.slice/sshd.service", "sshd", 77, 0)...)
	recs = append(recs, kill(7, "CONSTRAINT_NONE", "", cg, "\\x1b[31mevil", 1001, 900)...)
	// The sidecar keeps memory.oom.group: its other process goes with the victim, which the kernel logs again.
	recs = append(recs, kill(7, "CONSTRAINT_NONE", "", cgOther, "app2", 1008, -997)...)
	recs = append(recs, "6,8,1002,-;Tasks in "+cgOther+" are going to be killed due to memory.oom.group set", kill(0, "", "", "", "worker2", 1007, -997)[1],
		kill(0, "", "", "", "app2", 1008, -997)[1],
		strings.Replace(kill(0, "", "", "", "worker2", 1007, -997)[1], "1007 (worker2)", "1010 (worker2-gc)", 1))
	// Later, Killed process lines alone: one the sidecar counted (the
	// node's count is its), then one outside every pod (the node's count
	// holds it, no container's does).
	later := func(r string) string { return strings.Replace(r, ",1001,-;", ",3000000,-;", 1) }
	recs = append(recs, later(kill(9, "CONSTRAINT_MEMCG", "", "", "rate-limited", 1003, -997)[1]), later(kill(11, "CONSTRAINT_MEMCG", "", "", "another", 1004, -997)[1]))
	errs := make([]error, len(recs))
	recs, errs = append(recs, ""), append(errs, kmsg.ErrLost)
	src := &fakeKmsg{recs: recs, errs: errs, before: map[int]func(){0: vmstat(49), len(recs) - 2: vmstat(50)}}
	p.watchKills(context.Background(), oomkills.Log{Open: from(src)})

	out := logs.String()
	for _, want := range []string{
		`msg="OOM kill" pod=ml/pod-1 container=main pid=1001 command=python3 oom_score_adj=900 rss_kb=520 kind=container`,
		`msg="OOM kill" pod=ml/pod-1 container=sidecar pid=1002 command=app oom_score_adj=-997 rss_kb=520 kind=parent`,
		`msg="OOM kill" pid=77 command=sshd oom_score_adj=0 rss_kb=520 kind=node cgroup=/system.slice/sshd.service`,
		`msg="OOM kill" pod=ml/pod-1 container=sidecar pid=1003 command=rate-limited oom_score_adj=-997 rss_kb=520 kind=limit cgroup="" kernel_time=3s attributed_by=counters`,
		`msg="OOM kill" pid=1004 command=another oom_score_adj=-997 rss_kb=520 kind=limit cgroup="" kernel_time=3s attributed_by=counters reported_after=`,
		`node_daemon=true`,
		// The doctor's model: the guarded init at 900 outranked sshd at 0, whom
		// the kernel killed; the process at 900 outranked every survivor.
		`model_predicted=false model_first=init[1001] model_first_oom_score_adj=900 model_first_kb=2048 node_daemon=true`,
		`command=\x1b[31mevil oom_score_adj=900 rss_kb=520 kind=node cgroup=/kubepods.slice/kubepods-pod1.slice/cri-containerd-pod-1-main.scope kernel_time=1ms attributed_by=record reported_after=`,
		`model_predicted=true container_kept_running=true`,
		`msg="OOM kill" pod=ml/pod-1 container=sidecar pid=1007 command=worker2 oom_score_adj=-997 rss_kb=520 kind=node cgroup=/kubepods.slice/kubepods-pod1.slice/cri-containerd-pod-1-sidecar.scope kernel_time=1ms attributed_by=counters reported_after=`,
		`msg="largest processes after the OOM kill" pod=ml/pod-1 container=main rule=init-as-pid1 processes="1001 init 2048kB oom_score_adj 900"`,
		`container_kept_running=true`,
		`msg="kernel log records were overwritten`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log has no %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("a task's name reached the log unescaped:\n%q", out)
	}
	for name, want := range map[string]float64{"oomguard_oom_kills_total": 7, "oomguard_node_daemon_oom_kills_total": 1, "oomguard_kernel_log_lost_total": 1, "oomguard_node_oom_kills_predicted_total": 3} {
		if n := counted(t, p.m, name); n != want {
			t.Errorf("%s = %v, want %v", name, n, want)
		}
	}
	wantEvents := []string{
		"ml/pod-1 main OOMKilling: process 1001 (python3) was killed by the OOM killer for its container's memory limit, at oom_score_adj 900 with 520 KiB; the container kept running because memory.oom.group is 0",
		"ml/pod-1 sidecar OOMKilling: process 1002 (app) was killed by the OOM killer for a memory limit above its container (the pod's), at oom_score_adj -997 with 520 KiB",
		`ml/pod-1 main OOMKilling: process 1001 (\x1b[31mevil) was killed by the OOM killer for the node running out of memory, at oom_score_adj 900 with 520 KiB; the container kept running because memory.oom.group is 0`,
		"ml/pod-1 sidecar OOMKilling: process 1008 (app2) was killed by the OOM killer for the node running out of memory, at oom_score_adj -997 with 520 KiB",
		"ml/pod-1 sidecar OOMKilling: process 1007 (worker2) was killed by the OOM killer for the node running out of memory, at oom_score_adj -997 with 520 KiB",
		"ml/pod-1 sidecar OOMKilling: process 1003 (rate-limited) was killed by the OOM killer for a memory limit, at oom_score_adj -997 with 520 KiB",
	}
	if strings.Join(events.got, "\n") != strings.Join(wantEvents, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events.got, "\n"), strings.Join(wantEvents, "\n"))
	}
	if got := killSeries(t, p.m); got != "///limit=1 ml/pod-1/main/container=1 ml/pod-1/main/node=1 ml/pod-1/sidecar/limit=1 ml/pod-1/sidecar/node=2 ml/pod-1/sidecar/parent=1" {
		t.Errorf("series %s", got)
	}
	if err := p.RemoveContainer(context.Background(), pod, guarded); err != nil {
		t.Fatal(err)
	}
	if got := killSeries(t, p.m); got != "///limit=1 ml/pod-1/sidecar/limit=1 ml/pod-1/sidecar/node=2 ml/pod-1/sidecar/parent=1" {
		t.Errorf("after the container's removal: %s", got)
	}
}

type fakeRecorder struct{ got []string }

func (f *fakeRecorder) Warning(pod podevents.Pod, container, reason, message string) {
	f.got = append(f.got, fmt.Sprintf("%s/%s %s %s: %s", pod.Namespace, pod.Name, container, reason, message))
}

// killsOf is the kill counter's series of one container and kind.
func killsOf(t *testing.T, m *Metrics, namespace, pod, container, kind string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"namespace": namespace, "pod": pod, "container": container, "kind": kind}
	for _, mf := range mfs {
		if mf.GetName() != "oomguard_oom_kills_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range x.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if maps.Equal(got, want) {
				return x.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func killSeries(t *testing.T, m *Metrics) string {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "oomguard_oom_kills_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range x.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out = append(out, fmt.Sprintf("%s/%s/%s/%s=%v", l["namespace"], l["pod"], l["container"], l["kind"], x.GetCounter().GetValue()))
		}
	}
	return strings.Join(out, " ")
}
