package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/test/nodefixture"
)

type proc = nodefixture.Proc

const podCg = nodefixture.PodCgroup

func incidentProcs() []proc { return nodefixture.IncidentProcs() }

// fixture writes the incident's node with files changed or added.
func fixture(t *testing.T, procs []proc, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := nodefixture.Write(root, procs, nodefixture.IncidentFiles(files)); err != nil {
		t.Fatal(err)
	}
	return root
}

// findings examines root with the default configuration (and daemons, when
// given), through the JSON report.
func findings(t *testing.T, root string, daemons ...string) (map[string]Finding, int) {
	t.Helper()
	cfg := config.Default()
	if len(daemons) > 0 {
		cfg.Doctor.Daemons = daemons
	}
	r, err := Examine(root, cfg, 0, "none")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Findings []Finding `json:"findings"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	m := map[string]Finding{}
	for _, f := range rep.Findings {
		m[f.Check] = f
	}
	return m, r.ExitCode()
}

func TestIncidentNode(t *testing.T) {
	root := fixture(t, incidentProcs(), nil)
	fs, code := findings(t, root)
	if code != 2 {
		t.Errorf("exit %d, want 2 (critical)", code)
	}
	// The BestEffort sleep at 1000 outranks every daemon and frees nothing:
	// the kernel kills it, then the daemons, before the runaway at -997.
	r := fs["oom-ranking"]
	if r.Severity != Critical || !strings.Contains(r.Summary, "pod 8f1d2c3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f container 3f4e5d6c7b8a") ||
		!strings.Contains(r.Summary, "3 node daemons before it: sshd[400], systemd-network[410], rpcbind[415]") ||
		!strings.Contains(strings.Join(r.Details, "\n")+"\n", "killed before it, in order: sleep[600] (pod 1a2b3c4d-0000-4000-8000-000000000001), sshd[400], systemd-network[410], rpcbind[415]\n") ||
		!strings.Contains(r.Details[0], "limits sum to 178.0 GiB (0.93× RAM)") {
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
		if fixed[i].Cgroup == podCg || strings.HasPrefix(fixed[i].Cgroup, podCg) {
			fixed[i].Adj = 900
		}
	}
	noPods := incidentProcs()[:5]
	limited := map[string]string{"sys/fs/cgroup" + podCg + "/memory.max": "8589934592\n"}
	podLevel := map[string]string{"sys/fs/cgroup/kubepods.slice/memory.max": "68719476736\n", "sys/fs/cgroup/kubepods.slice/memory.current": "2168455168\n"}
	for _, tc := range []struct {
		name  string
		procs []proc
		files map[string]string
		want  Severity
		in    string
	}{
		{"fixed by oomguard", fixed, nil, OK, "the kernel would kill each one's runaway before any node daemon"},
		{"no pods", noPods, nil, Info, ""},
		// An 8 GiB limit stops the runaway first: a cgroup OOM, not the node's.
		{"its own limit stops it", incidentProcs(), limited, OK, "1 of 2 containers can fill the node"},
		{"an ancestor's limit stops it", incidentProcs(), podLevel, OK, "none of 2 containers can fill the node"},
		{"unreadable usage", incidentProcs(), map[string]string{"sys/fs/cgroup" + podCg + "/memory.current": "garbage"}, Unknown, ""},
		{"no meminfo", incidentProcs(), map[string]string{"proc/meminfo": "<missing>"}, Unknown, "meminfo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := findings(t, fixture(t, tc.procs, tc.files))
			if f := fs["oom-ranking"]; f.Severity != tc.want || !strings.Contains(f.Summary, tc.in) {
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
					procs[i].Cgroup = "" // the fixture writes 0:: lines; v1 reads memory lines
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
		many = append(many, proc{Pid: 1000 + i, PPid: 520, Comm: "worker", Cmdline: "worker", Cgroup: podCg})
	}
	for _, tc := range []struct {
		name  string
		procs []proc
		files map[string]string
		want  Severity
		secs  float64
	}{
		// 410 tasks × 145 characters at 11,520 characters a second.
		{"incident at 115200", many, nil, Critical, 410 * 145 / 11520.0},
		{"few tasks", incidentProcs(), nil, OK, 10 * 145 / 11520.0},
		{"default 9600 baud", incidentProcs(), map[string]string{"proc/cmdline": "console=ttyS0\n"}, Warning, 10 * 145 / 960.0},
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

// A captured tree is anything its author made it: FIFOs, links to devices,
// absurd CPU lists, escape sequences in process names. The doctor neither
// hangs, nor runs out of memory, nor lets a name drive the terminal.
func TestHostileTree(t *testing.T) {
	procs := incidentProcs()
	procs = append(procs, proc{Pid: 600, PPid: 510, Comm: "\x1b[2J\x1b[Hpwned\nline", Cmdline: "\x1b]0;title\x07", Adj: -997, Cgroup: podCg})
	files := map[string]string{
		"proc/interrupts":                       incidentInterrupts,
		"proc/irq/1795/smp_affinity_list":       "0-200000000\n",
		"proc/irq/1794/effective_affinity_list": "3,4096-8000000\n",
		"proc/stat.next":                        "cpu  1 0 1 8 0 0 0 0\ncpu0 1 0 1 8 0 0 0 0\n",
	}
	root := fixture(t, procs, files)
	mkfifo := func(p string) {
		os.Remove(filepath.Join(root, p))
		if err := syscall.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, target string) {
		os.Remove(filepath.Join(root, p))
		os.Symlink(target, filepath.Join(root, p))
	}
	mkfifo("proc/consoles")
	mkfifo("proc/520/cmdline")
	mkfifo("sys/fs/cgroup" + podCg + "/memory.oom.group")
	link("proc/sys/vm/oom_dump_tasks", "/dev/zero")
	link("proc/420/stat", "/dev/zero")
	link("proc/cmdline", "/dev/urandom")

	r, err := Examine(root, config.Default(), 0, "none")
	if err != nil {
		t.Fatal(err)
	}
	var text, tree bytes.Buffer
	r.WriteText(&text, false)
	r.WriteTree(&tree)
	out := text.String() + tree.String()
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Fatalf("raw control characters in the report:\n%q", out)
	}
	if !strings.Contains(tree.String(), `\x1b[2J\x1b[Hpwned\nline`) {
		t.Fatalf("the hostile name must be shown escaped:\n%s", tree.String())
	}
	fs := map[string]Finding{}
	for _, f := range r.Findings {
		fs[f.Check] = f
	}
	if fs["console"].Severity != Unknown {
		t.Errorf("console from a /dev/zero sysctl and a FIFO: %+v", fs["console"])
	}
	if fs["nic-cpu"].Severity == Critical {
		t.Errorf("nic-cpu: %+v", fs["nic-cpu"])
	}
}

func TestConsoleUnparseablePrintk(t *testing.T) {
	for _, v := range []string{"lots\n", "\n", "7x 4 1 7\n"} {
		fs, _ := findings(t, fixture(t, incidentProcs(), map[string]string{"proc/sys/kernel/printk": v}))
		if f := fs["console"]; f.Severity != Unknown || !strings.Contains(f.Summary, "kernel.printk") {
			t.Errorf("printk %q: %+v", v, f)
		}
	}
}

// The JSON report says which node, when, which doctor and which schema; the
// textfile has every gauge on every run (NaN when a check measured
// nothing), when it was made and the doctor's version.
func TestReportHeader(t *testing.T) {
	root := fixture(t, incidentProcs(), map[string]string{"proc/sys/kernel/hostname": "gpu-node-7\n"})
	t.Setenv("NODE_NAME", "")
	r, err := Examine(root, config.Default(), 0, "none")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r.WriteJSON(&out)
	var head struct {
		SchemaVersion int       `json:"schema_version"`
		Node          string    `json:"node"`
		Time          time.Time `json:"time"`
		Version       string    `json:"version"`
	}
	if err := json.Unmarshal(out.Bytes(), &head); err != nil || head.SchemaVersion != SchemaVersion || head.Node != "gpu-node-7" ||
		head.Time.IsZero() || !head.Time.Equal(r.Time) || head.Version == "" {
		t.Fatalf("report header %+v (%v)", head, err)
	}
	for i := range r.Findings {
		r.Findings[i].Metric = nil // as when every check failed to measure
	}
	out.Reset()
	r.WritePrometheus(&out)
	for _, g := range gauges {
		if !strings.Contains(out.String(), "\n"+g.Name+" NaN\n") {
			t.Errorf("no %s NaN in:\n%s", g.Name, out.String())
		}
	}
	if !strings.Contains(out.String(), fmt.Sprintf("oomguard_doctor_last_run_timestamp_seconds %d\n", r.Time.Unix())) ||
		!strings.Contains(out.String(), `oomguard_doctor_info{version="`) {
		t.Errorf("textfile:\n%s", out.String())
	}
}
