package enforce

import (
	"errors"

	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/internal/policy"
)

// tree writes files (path → content) under a new temporary root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func read(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }

const (
	pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
	ctr = pod + "/cri-containerd-abc.scope"
)

// v2 is a cgroup v2 node with one container (pids 10 and 11, 11 in a child
// cgroup), its pod, a system service (pid 20), and pid 1.
func v2(t *testing.T) string {
	return tree(t, map[string]string{
		"sys/fs/cgroup/cgroup.controllers":                     "cpu memory",
		"sys/fs/cgroup" + ctr + "/memory.oom.group":            "1\n",
		"sys/fs/cgroup" + ctr + "/cgroup.procs":                "10\n",
		"sys/fs/cgroup" + ctr + "/sub/cgroup.procs":            "11\n",
		"sys/fs/cgroup" + ctr + "/memory.events":               "oom 2\noom_kill 1\n",
		"sys/fs/cgroup" + pod + "/memory.oom.group":            "0\n",
		"sys/fs/cgroup/system.slice/sshd.service/cgroup.procs": "20\n",
		"proc/1/cgroup":         "0::/init.scope\n",
		"proc/10/cgroup":        "0::" + ctr + "\n",
		"proc/10/oom_score_adj": "-997\n",
		"proc/11/cgroup":        "0::" + ctr + "/sub\n",
		"proc/11/oom_score_adj": "-997\n",
		"proc/20/cgroup":        "0::/system.slice/sshd.service\n",
		"proc/20/oom_score_adj": "0\n",
	})
}

func TestPlanMasksWhatTheNodeCannotHave(t *testing.T) {
	d := policy.Decision{Rule: "r", OOMScoreAdj: ptr(900), OOMGroup: ptr(false)}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		group   bool
		dropped string
	}{
		{"v2", map[string]string{"sys/fs/cgroup/cgroup.controllers": ""}, true, ""},
		{"hybrid", map[string]string{"sys/fs/cgroup/memory/tasks": "", "sys/fs/cgroup/unified/cgroup.controllers": ""}, false, "unsupported on cgroup v1 (hybrid)"},
		{"v1", map[string]string{"sys/fs/cgroup/memory/tasks": ""}, false, "unsupported on cgroup v1"},
		{"none", map[string]string{"proc/1/cgroup": ""}, false, "unsupported: no cgroup filesystem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewNode(tree(t, tc.files), nil).Plan(d)
			if (p.Group != nil) != tc.group || p.Dropped != tc.dropped || p.Score == nil || *p.Score != 900 || p.Rule != "r" {
				t.Fatalf("plan %+v", p)
			}
			if want := map[bool]string{true: "1→0", false: tc.dropped}[tc.group]; p.GroupChange(ptr(true)).String() != want {
				t.Fatalf("group change %q, want %q", p.GroupChange(ptr(true)), want)
			}
		})
	}
	if p := NewNode(t.TempDir(), nil).Plan(policy.Decision{}); p.Changes() || p.ScoreChange(ptr(5)).String() != "left" || p.GroupChange(nil).String() != "left" {
		t.Fatalf("an empty decision plans nothing: %+v", p)
	}
}

func TestChangeString(t *testing.T) {
	for _, tc := range []struct {
		c    Change
		want string
	}{
		{Change{What: Left}, "left"},
		{Change{What: Planned, To: "900"}, "unset→900"},
		{Change{What: Planned, From: "-997", To: "900"}, "-997→900"},
		{Change{What: Changed, From: "1", To: "0"}, "1→0"},
		{Change{What: Unchanged, From: "900", To: "900"}, "unchanged 900"},
		{Change{What: Unsupported, Why: "unsupported on cgroup v1"}, "unsupported on cgroup v1"},
		{Change{What: Refused, Err: errors.New("x")}, "refused"},
		{Change{What: Failed, Err: errors.New("x")}, "failed"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}

func TestLocate(t *testing.T) {
	root := v2(t)
	n := NewNode(root, []string{"/machine.slice"})
	for _, tc := range []struct {
		name, cgroupsPath string
		pid               int
		want, err         string
	}{
		{"systemd driver", "kubepods-burstable-pod1.slice:cri-containerd:abc", 0, ctr, ""},
		{"cgroupfs path", ctr, 0, ctr, ""},
		{"the container of the pid's cgroup", "", 11, ctr, ""},
		{"a containment parent's child", "/machine.slice/libpod-x.scope", 0, "/machine.slice/libpod-x.scope", ""},
		{"the root", "/", 0, "", "not one container's cgroup"},
		{"an escape", "../../..", 0, "", "not one container's cgroup"},
		{"kubepods", "/kubepods.slice", 0, "", "not one container's cgroup"},
		{"a pod", pod, 0, "", "not one container's cgroup"},
		{"a service", "/system.slice/sshd.service", 0, "", "not one container's cgroup"},
		{"a containment parent itself", "/machine.slice", 0, "", "not one container's cgroup"},
		{"a service by its pid", "", 20, "", "not one container's cgroup"},
		{"nothing to go by", "", 0, "", "no cgroupsPath and no pid"},
		{"a bad slice", "a--b.slice:p:x", 0, "", "invalid slice name"},
		{"a vanished pid", "", 99, "", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := n.Locate(tc.cgroupsPath, tc.pid)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Locate = %v, %v; want an error with %q", c, err, tc.err)
			case tc.err == "" && (err != nil || c.Cgroup() != tc.want):
				t.Fatalf("Locate = %v, %v; want %s", c, err, tc.want)
			}
		})
	}
}

// Seen from a cgroup namespace (the DaemonSet's plugin in its pod's), other
// pods' processes show "/../.."-relative paths: they are mapped back by the
// namespace's depth, and a process in the reader's own namespace is no pod's.
func TestHostPath(t *testing.T) {
	for _, tc := range []struct {
		depth      int
		cgroup     string
		seen, want string
	}{
		// The reader's namespace is its own container's cgroup, four deep:
		// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod9.slice/cri-containerd-self.scope.
		{0, ctr, ctr, ctr},
		{4, ctr, "/../../kubepods-burstable-pod1.slice/cri-containerd-abc.scope", ctr},
		{4, ctr, "/../../kubepods-burstable-pod1.slice/cri-containerd-abc.scope/sub", ctr + "/sub"},
		{4, ctr, "/../../kubepods-burstable-pod1.slice/cri-containerd-other.scope", pod + "/cri-containerd-other.scope"},
		{4, ctr, "/../../../kubepods-besteffort.slice/kubepods-besteffort-pod2.slice/x.scope",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod2.slice/x.scope"},
		{4, ctr, "/oomguard.scope", ""},        // inside the reader's own namespace
		{4, ctr, "/../../../../../../etc", ""}, // climbs past the root
		{1, "/a", "/../../b", ""},
	} {
		c := &Container{n: &Node{nsDepth: tc.depth}, cgroup: tc.cgroup}
		if got := c.hostPath(tc.seen); got != tc.want {
			t.Errorf("depth %d, container %s: hostPath(%q) = %q, want %q", tc.depth, tc.cgroup, tc.seen, got, tc.want)
		}
	}
}

// A plugin in a pod's cgroup namespace finds the container by its spec's
// path and its processes by the "/.."-relative paths it sees.
func TestNamespacedReader(t *testing.T) {
	root := v2(t)
	const own = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod9.slice/cri-containerd-self.scope"
	os.WriteFile(filepath.Join(root, "proc/1/cgroup"), []byte("0::/../../../../init.scope\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc/10/cgroup"), []byte("0::/../../kubepods-burstable-pod1.slice/cri-containerd-abc.scope\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc/11/cgroup"), []byte("0::/../../kubepods-burstable-pod1.slice/cri-containerd-abc.scope/sub\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "sys/fs/cgroup", own), 0o755)
	n := NewNode(root, nil)
	if n.nsDepth != 4 {
		t.Fatalf("depth %d, want 4", n.nsDepth)
	}
	if _, err := n.Locate("", 10); err == nil {
		t.Fatal("a pid's namespaced path must not be taken for the host's")
	}
	c, err := n.Locate(ctr, 0)
	if err != nil {
		t.Fatal(err)
	}
	if changed, errs := c.Scores(900); changed != 2 || errs != nil {
		t.Fatalf("Scores = %d, %v", changed, errs)
	}
}

func TestWrites(t *testing.T) {
	root := v2(t)
	n := NewNode(root, nil)
	c, err := n.Locate(ctr, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ch := c.Group(false); ch.What != Changed || ch.String() != "1→0" || read(t, root, "sys/fs/cgroup"+ctr+"/memory.oom.group") != "0\n" {
		t.Fatalf("Group = %+v", ch)
	}
	if ch := c.Group(false); ch.What != Unchanged || ch.String() != "unchanged 0" {
		t.Fatalf("Group again = %+v", ch)
	}
	if ch := c.Score(10, 900); ch.What != Changed || ch.String() != "-997→900" || read(t, root, "proc/10/oom_score_adj") != "900\n" {
		t.Fatalf("Score = %+v", ch)
	}
	if ch := c.Score(20, 900); ch.What != Refused || !errors.Is(ch.Err, ErrNotContained) || read(t, root, "proc/20/oom_score_adj") != "0\n" {
		t.Fatalf("another cgroup's process: %+v", ch)
	}
	if ch := c.Score(99, 900); ch.What != Failed || !IsGone(ch.Err) {
		t.Fatalf("a vanished process: %+v", ch)
	}
	if changed, errs := c.Scores(900); changed != 1 || errs != nil || read(t, root, "proc/11/oom_score_adj") != "900\n" {
		t.Fatalf("Scores = %d, %v", changed, errs)
	}
	if ev, err := c.MemoryEvents(); err != nil || ev["oom_kill"] != 1 {
		t.Fatalf("MemoryEvents = %v, %v", ev, err)
	}
	gone, _ := n.Contain(pod + "/cri-containerd-gone.scope")
	if changed, errs := gone.Scores(900); changed != 0 || errs != nil {
		t.Fatalf("a removed container: %d, %v", changed, errs)
	}
	if ch := gone.Group(false); ch.What != Failed || !IsGone(ch.Err) {
		t.Fatalf("a removed container's group: %+v", ch)
	}
}

// Apply is the hook's path: the init's score and the container's group, or
// nothing at all when either the cgroup or the pid is not the container's.
func TestApply(t *testing.T) {
	plan := Plan{Rule: "r", Score: ptr(900), Group: ptr(false)}
	for _, tc := range []struct {
		name                string
		cgroupsPath         string
		pid                 int
		score, group, wantE string
	}{
		{"the container's init", "kubepods-burstable-pod1.slice:cri-containerd:abc", 10, "-997→900", "1→0", ""},
		{"by the pid alone", "", 10, "-997→900", "1→0", ""},
		{"a pid outside the spec's cgroup", ctr, 20, "refused", "refused", "refusing to write"},
		{"a pod's cgroup", pod, 10, "refused", "refused", "refusing to write"},
		{"a vanished pid", ctr, 99, "refused", "refused", "pid 99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := v2(t)
			n := NewNode(root, nil)
			score, group, err := n.Apply(plan, tc.cgroupsPath, tc.pid)
			if score.String() != tc.score || group.String() != tc.group || (tc.wantE == "") != (err == nil) ||
				(err != nil && !strings.Contains(err.Error(), tc.wantE)) {
				t.Fatalf("Apply = %s, %s, %v; want %s, %s, %q", score, group, err, tc.score, tc.group, tc.wantE)
			}
			if tc.wantE != "" && (read(t, root, "proc/20/oom_score_adj") != "0\n" || read(t, root, "sys/fs/cgroup"+pod+"/memory.oom.group") != "0\n") {
				t.Fatal("written outside the container")
			}
		})
	}
	root := tree(t, map[string]string{"sys/fs/cgroup/memory/tasks": "", "proc/10/cgroup": "4:memory:" + ctr + "\n", "proc/10/oom_score_adj": "-997\n"})
	n := NewNode(root, nil)
	score, group, err := n.Apply(n.Plan(policy.Decision{OOMScoreAdj: ptr(900), OOMGroup: ptr(false)}), ctr, 10)
	if err != nil || score.String() != "-997→900" || group.String() != "unsupported on cgroup v1" {
		t.Fatalf("cgroup v1: %s, %s, %v", score, group, err)
	}

}
