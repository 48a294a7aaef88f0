package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// proc is one process of a fixture node.
type proc struct {
	pid, ppid   int
	comm        string
	cmdline     string // NUL-separated
	score, adj  int
	cgroup      string // unified path, or "" for /
	kernelTread bool
}

// The incident's node, in miniature: daemons at 0, a VM-like pod at -997.
const (
	podCg  = "/kubepods.slice/kubepods-pod8f1d2c3e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/cri-containerd-3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e.scope"
	shimCg = "/system.slice/containerd.service"
)

func incidentProcs() []proc {
	return []proc{
		{pid: 1, comm: "systemd", cmdline: "/lib/systemd/systemd", adj: 0},
		{pid: 2, comm: "kthreadd", kernelTread: true},
		{pid: 400, ppid: 1, comm: "sshd", cmdline: "sshd: /usr/sbin/sshd -D", score: 2},
		{pid: 410, ppid: 1, comm: "systemd-network", cmdline: "/lib/systemd/systemd-networkd", score: 1},
		{pid: 420, ppid: 1, comm: "kubelet", cmdline: "/usr/bin/kubelet", score: 0, adj: -999},
		{pid: 430, ppid: 1, comm: "containerd", cmdline: "/usr/bin/containerd", score: 0, adj: -999, cgroup: shimCg},
		{pid: 500, ppid: 1, comm: "containerd-shim", cmdline: "/usr/bin/containerd-shim-runc-v2", adj: -998, cgroup: shimCg},
		{pid: 510, ppid: 500, comm: "systemd", cmdline: "/sbin/init", score: 0, adj: -997, cgroup: podCg},
		{pid: 520, ppid: 510, comm: "python3", cmdline: "python3\x00train.py", score: 0, adj: -997, cgroup: podCg + "/user.slice"},
	}
}

// fixture writes a node tree: processes, cgroup v2 unless files say otherwise.
func fixture(t *testing.T, procs []proc, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	w := func(p, c string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		d := fmt.Sprintf("proc/%d/", p.pid)
		flags := 0
		if p.kernelTread {
			flags = 0x00200000
		}
		w(d+"stat", fmt.Sprintf("%d (%s) S %d %d %d 0 -1 %d 0 0 0 0\n", p.pid, p.comm, p.ppid, p.pid, p.pid, flags))
		w(d+"cmdline", p.cmdline)
		w(d+"oom_score", fmt.Sprint(p.score))
		w(d+"oom_score_adj", fmt.Sprint(p.adj))
		cg := p.cgroup
		if cg == "" {
			cg = "/"
		}
		w(d+"cgroup", "0::"+cg+"\n")
	}
	defaults := map[string]string{
		"sys/fs/cgroup/cgroup.controllers":              "cpu memory pids",
		"sys/fs/cgroup/cgroup.stat":                     "nr_descendants 40\nnr_dying_descendants 12\n",
		"proc/sys/vm/oom_dump_tasks":                    "1\n",
		"proc/sys/kernel/printk":                        "7\t4\t1\t7\n",
		"proc/sys/kernel/osrelease":                     "6.1.0-56-cloud-amd64\n",
		"proc/consoles":                                 "ttyS0 -W- (EC p a) 4:64\ntty0 -WU (E p ) 4:1\n",
		"proc/cmdline":                                  "BOOT_IMAGE=/vmlinuz root=UUID=x ro console=tty0 console=ttyS0,115200n8\n",
		"proc/interrupts":                               "           CPU0       CPU1       CPU2       CPU3\n  0:         40          0          0          0   IO-APIC   2-edge      timer\n",
		"proc/stat":                                     "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 25 0 25 200 0 0 0 0 0 0\n",
		"sys/fs/cgroup" + podCg + "/memory.oom.group":   "1\n",
		"sys/fs/cgroup" + podCg + "/user.slice/.keep":   "",
		"sys/fs/cgroup/kubepods.slice/memory.oom.group": "0\n",
		"sys/fs/cgroup" + shimCg + "/memory.oom.group":  "0\n",
		"sys/fs/cgroup/system.slice/memory.oom.group":   "0\n",
		"sys/fs/cgroup/kubepods.slice/kubepods-pod8f1d2c3e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/memory.oom.group": "0\n",
	}
	for p, c := range files {
		defaults[p] = c
	}
	for p, c := range defaults {
		if c == "<missing>" {
			continue
		}
		w(p, c)
	}
	return root
}

func findings(t *testing.T, root string, extra ...string) (map[string]Finding, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"--root", root, "--json", "--sample", "0", "--config", writeDefaultConfig(t)}, extra...), &out, &errb)
	var rep struct {
		Findings []Finding `json:"findings"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, output %q, stderr %q", code, out.String(), errb.String())
	}
	m := map[string]Finding{}
	for _, f := range rep.Findings {
		m[f.Check] = f
	}
	return m, code
}

func writeDefaultConfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(p, nil, 0o644)
	return p
}

func (s *Severity) UnmarshalText(b []byte) error {
	for i := OK; i <= Critical; i++ {
		if i.String() == string(b) {
			*s = i
			return nil
		}
	}
	return fmt.Errorf("severity %q", b)
}

func TestIncidentNode(t *testing.T) {
	root := fixture(t, incidentProcs(), nil)
	fs, code := findings(t, root)
	if code != 2 {
		t.Errorf("exit %d, want 2 (critical)", code)
	}
	r := fs["oom-ranking"]
	if r.Severity != Critical || len(r.Details) != 2 || !strings.Contains(r.Details[0], "sshd[400] oom_score 2") || !strings.Contains(r.Summary, "pod 8f1d2c3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f container 3f4e5d6c7b8a") {
		t.Errorf("oom-ranking: %+v", r)
	}
	g := fs["group-kill"]
	if g.Severity != Critical || len(g.Details) != 1 || !strings.Contains(g.Details[0], "PID 1 is systemd[510]") {
		t.Errorf("group-kill: %+v", g)
	}
}

func TestRanking(t *testing.T) {
	fixed := incidentProcs()
	for i := range fixed {
		if fixed[i].cgroup == podCg || strings.HasPrefix(fixed[i].cgroup, podCg) {
			fixed[i].adj, fixed[i].score = 900, 950
		}
	}
	noPods := incidentProcs()[:5]
	for _, tc := range []struct {
		name  string
		procs []proc
		want  Severity
	}{
		{"fixed by oomguard", fixed, OK},
		{"no pods", noPods, Info},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := findings(t, fixture(t, tc.procs, nil))
			if f := fs["oom-ranking"]; f.Severity != tc.want {
				t.Fatalf("%+v", f)
			}
		})
	}
}

func TestGroupKill(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  Severity
	}{
		{"group off", map[string]string{"sys/fs/cgroup" + podCg + "/memory.oom.group": "0\n"}, OK},
		{"set on the pod level", map[string]string{"sys/fs/cgroup" + podCg + "/memory.oom.group": "0\n",
			"sys/fs/cgroup/kubepods.slice/kubepods-pod8f1d2c3e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/memory.oom.group": "1\n"}, Critical},
		{"cgroup v1", map[string]string{"sys/fs/cgroup/cgroup.controllers": "<missing>", "sys/fs/cgroup/memory/tasks": "", "proc/cgroups": "memory 4 3 1\n"}, OK},
		{"vanished cgroup", map[string]string{"sys/fs/cgroup" + podCg + "/memory.oom.group": "garbage"}, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procs := incidentProcs()
			if tc.name == "cgroup v1" {
				for i := range procs {
					procs[i].cgroup = "" // the fixture writes 0:: lines; v1 reads memory lines
				}
			}
			fs, _ := findings(t, fixture(t, procs, tc.files))
			if f := fs["group-kill"]; f.Severity != tc.want {
				t.Fatalf("%+v", f)
			}
		})
	}
}

func TestConsole(t *testing.T) {
	many := incidentProcs()
	for i := 0; i < 400; i++ {
		many = append(many, proc{pid: 1000 + i, ppid: 520, comm: "worker", cmdline: "worker", cgroup: podCg})
	}
	for _, tc := range []struct {
		name  string
		procs []proc
		files map[string]string
		want  Severity
		secs  float64
	}{
		// 408 tasks × 145 characters at 11,520 characters a second.
		{"incident at 115200", many, nil, Critical, 408 * 145 / 11520.0},
		{"few tasks", incidentProcs(), nil, OK, 8 * 145 / 11520.0},
		{"default 9600 baud", incidentProcs(), map[string]string{"proc/cmdline": "console=ttyS0\n"}, Warning, 8 * 145 / 960.0},
		{"dump off", many, map[string]string{"proc/sys/vm/oom_dump_tasks": "0\n"}, OK, -1},
		{"quiet loglevel", many, map[string]string{"proc/sys/kernel/printk": "4 4 1 7\n"}, OK, 0},
		{"no serial console", many, map[string]string{"proc/consoles": "tty0 -WU (EC p ) 4:1\n"}, OK, -1},
		{"serial console disabled", many, map[string]string{"proc/consoles": "ttyS0 -W- (C p a) 4:64\n"}, OK, -1},
		{"unreadable consoles", many, map[string]string{"proc/consoles": "<missing>"}, Unknown, -1},
		{"unreadable sysctl", many, map[string]string{"proc/sys/vm/oom_dump_tasks": "<missing>"}, Unknown, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := findings(t, fixture(t, tc.procs, tc.files))
			f := fs["console"]
			if f.Severity != tc.want {
				t.Fatalf("%+v", f)
			}
			if tc.secs >= 0 && (f.Metric == nil || fmt.Sprintf("%.3f", f.Metric.Value) != fmt.Sprintf("%.3f", tc.secs)) {
				t.Fatalf("seconds %+v, want %.3f", f.Metric, tc.secs)
			}
		})
	}
	// The incident's own figures: 20,000 tasks at 115200 baud.
	if s := float64(20000*charsPerTask) / (115200 / 10); s < 250 || s > 260 {
		t.Fatalf("20,000 tasks at 115200 baud: %.0f s", s)
	}
}

func TestZombies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  Severity
	}{
		{"few", nil, OK},
		{"many", map[string]string{"sys/fs/cgroup/cgroup.stat": "nr_dying_descendants 5000\n"}, Warning},
		{"pinterest", map[string]string{"sys/fs/cgroup/cgroup.stat": "nr_dying_descendants 70000\n"}, Critical},
		{"el7", map[string]string{"sys/fs/cgroup/cgroup.stat": "nr_dying_descendants 500\n", "proc/sys/kernel/osrelease": "3.10.0-1160.el7.x86_64\n"}, Warning},
		{"el7 many", map[string]string{"sys/fs/cgroup/cgroup.stat": "nr_dying_descendants 1500\n", "proc/sys/kernel/osrelease": "3.10.0-1160.el7.x86_64\n"}, Critical},
		{"v1", map[string]string{"sys/fs/cgroup/cgroup.controllers": "<missing>", "sys/fs/cgroup/memory/a/b/.keep": "", "proc/cgroups": "#subsys_name hierarchy num_cgroups enabled\nmemory 4 2003 1\n"}, Warning},
		{"unreadable", map[string]string{"sys/fs/cgroup/cgroup.stat": "<missing>"}, Unknown},
		{"garbage", map[string]string{"sys/fs/cgroup/cgroup.stat": "what\n"}, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := findings(t, fixture(t, incidentProcs(), tc.files))
			if f := fs["zombie-memcgs"]; f.Severity != tc.want {
				t.Fatalf("%+v", f)
			}
		})
	}
}

// The incident's /proc/interrupts: eth0's queue 1 pinned to one CPU.
const incidentInterrupts = `           CPU0       CPU1       CPU2       CPU3
  0:         40          0          0          0   IO-APIC   2-edge      timer
1794:         0          0          0   23605613   PCI-MSI 2097152-edge      eth0-Tx-Rx-0
1795:         0   22511345          0          0   PCI-MSI 2097153-edge      eth0-Tx-Rx-1
1796:         0          0          0          0   PCI-MSI 2097154-edge      eth0-Tx-Rx-2
NMI:          0          0          0          0   Non-maskable interrupts
`

func TestNICCPU(t *testing.T) {
	stat := "cpu  1000 0 1000 8000 0 0 0 0\ncpu0 250 0 250 2000 0 0 0 0\ncpu1 250 0 250 2000 0 0 0 0\ncpu2 250 0 250 2000 0 0 0 0\ncpu3 250 0 250 2000 0 0 0 0\n"
	// One second later: cpu1 spent 95 of 100 ticks in the kernel.
	hot := "cpu  1010 0 1105 8285 0 0 0 0\ncpu0 255 0 250 2095 0 0 0 0\ncpu1 250 0 345 2005 0 0 0 0\ncpu2 255 0 255 2090 0 0 0 0\ncpu3 250 0 255 2095 0 0 0 0\n"
	calm := "cpu  1040 0 1040 8320 0 0 0 0\ncpu0 260 0 260 2080 0 0 0 0\ncpu1 260 0 260 2080 0 0 0 0\ncpu2 260 0 260 2080 0 0 0 0\ncpu3 260 0 260 2080 0 0 0 0\n"
	base := map[string]string{"proc/interrupts": incidentInterrupts, "proc/stat": stat, "proc/irq/1795/smp_affinity_list": "1\n", "proc/irq/1794/smp_affinity_list": "3\n"}
	with := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  Severity
		text  string
	}{
		{"saturated NIC core", with(map[string]string{"proc/stat.next": hot}), Warning, "cpu1 95% sys+irq+softirq, serves eth0-Tx-Rx-1"},
		{"calm", with(map[string]string{"proc/stat.next": calm}), OK, ""},
		{"not sampled", base, Unknown, "sampling disabled"},
		{"no affinity files: the CPUs that took the interrupts", with(map[string]string{"proc/stat.next": hot, "proc/irq/1795/smp_affinity_list": "<missing>"}), Warning, "cpu1"},
		{"no NIC", map[string]string{"proc/stat.next": hot}, Info, ""},
		{"unreadable interrupts", map[string]string{"proc/interrupts": "<missing>"}, Unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := findings(t, fixture(t, incidentProcs(), tc.files))
			f := fs["nic-cpu"]
			if f.Severity != tc.want || !strings.Contains(f.Summary+strings.Join(f.Details, " "), tc.text) {
				t.Fatalf("%+v", f)
			}
		})
	}
}

func TestOutputsAndErrors(t *testing.T) {
	root := fixture(t, incidentProcs(), nil)
	var out, errb bytes.Buffer
	if code := run([]string{"--root", root, "--prometheus", "--sample", "0", "--config", writeDefaultConfig(t)}, &out, &errb); code != 2 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{`oomguard_doctor_severity{check="oom-ranking"} 4`, "oomguard_doctor_daemons_outranking_pods 2", "# TYPE oomguard_doctor_console_dump_seconds gauge"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("prometheus output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	run([]string{"--root", root, "--tree", "--sample", "0", "--config", writeDefaultConfig(t)}, &out, &errb)
	for _, want := range []string{"CRITICAL  oom-ranking", "fix: ", "[1] systemd: 0 (+0)", "    [510] systemd: 0 (-997)  [pod 8f1d2c3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f container 3f4e5d6c7b8a]", "[400] sshd: 2 (+0)  [node daemon]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--json", "--prometheus"}, 4, "exclude each other"},
		{[]string{"extra"}, 4, "flags only"},
		{[]string{"--root", filepath.Join(t.TempDir(), "nothing")}, 4, "list processes"},
		{[]string{"--config", "/nonexistent.toml"}, 4, "nonexistent.toml"},
		{[]string{"--interval", "1m"}, 4, "--interval needs --output"},
		{[]string{"--root", root, "--sample", "0", "--prometheus", "--output", "/proc/none/x.prom"}, 4, "/proc/none"},
	} {
		errb.Reset()
		if code := run(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d %q", tc.args, code, errb.String())
		}
	}
	// --output writes the textfile atomically.
	prom := filepath.Join(t.TempDir(), "oomguard.prom")
	if code := run([]string{"--root", root, "--sample", "0", "--prometheus", "--output", prom, "--config", writeDefaultConfig(t)}, &out, &errb); code != 2 {
		t.Fatalf("--output: exit %d %s", code, errb.String())
	}
	if b, _ := os.ReadFile(prom); !strings.Contains(string(b), "oomguard_doctor_severity") {
		t.Fatalf("textfile: %s", b)
	}
	// A tree with processes only: everything else degrades to unknown, no crash.
	bare := t.TempDir()
	os.MkdirAll(filepath.Join(bare, "proc", "1"), 0o755)
	fs, _ := findings(t, bare)
	if len(fs) != 5 || fs["console"].Severity != Unknown || fs["zombie-memcgs"].Severity != Unknown || fs["nic-cpu"].Severity != Unknown {
		t.Fatalf("bare tree: %+v", fs)
	}
	// --daemons replaces the list.
	fs, _ = findings(t, root, "--daemons", "kubelet")
	if fs["oom-ranking"].Severity != OK {
		t.Fatalf("kubelet alone (at -999) does not outrank the pod: %+v", fs["oom-ranking"])
	}
}

// This machine's real /proc, through the same code.
func TestRealProc(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"--sample", "100ms", "--tree", "--config", writeDefaultConfig(t)}, &out, &errb)
	if code > 2 || !strings.Contains(out.String(), "oom-ranking") || errb.Len() > 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}
