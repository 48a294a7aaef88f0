package kmsg

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func rec(t *testing.T, s string) Record {
	t.Helper()
	r, err := ParseRecord([]byte(s))
	if err != nil {
		t.Fatalf("ParseRecord(%q): %v", s, err)
	}
	return r
}

func TestParseRecord(t *testing.T) {
	r := rec(t, "6,1234,5678901,-;Memory cgroup out of memory: Killed process 1\n SUBSYSTEM=x\n")
	if r.Seq != 1234 || r.Priority != 6 || r.Time != 5678901*time.Microsecond || r.Msg != "Memory cgroup out of memory: Killed process 1" {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []string{"", "6,1;x", "a,b,c;x", "6,1,2", "-1,1,2;x", "6,1,-2;x"} {
		if _, err := ParseRecord([]byte(bad)); err == nil {
			t.Errorf("ParseRecord(%q) took it", bad)
		}
	}
}

const (
	memcgLine  = "6,900,1000000,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abc,mems_allowed=0,oom_memcg=/kubepods/podU/ctr,task_memcg=/kubepods/podU/ctr,task=python3,pid=4242,uid=0"
	memcgKill  = "3,901,1000100,-;Memory cgroup out of memory: Killed process 4242 (python3) total-vm:10000kB, anon-rss:2000kB, file-rss:300kB, shmem-rss:4kB, UID:0 pgtables:80kB oom_score_adj:900"
	globalLine = "6,902,2000000,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/sshd.service,task=sshd,pid=77,uid=0"
	globalKill = "3,903,2000100,-;Out of memory: Killed process 77 (sshd) total-vm:9000kB, anon-rss:1000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0"
	groupLine  = "6,903,1000150,-;Tasks in /kubepods/podU/ctr are going to be killed due to memory.oom.group set"
)

var ctrReading = []Memcgs{{OOM: "/kubepods/podU/ctr", Task: "/kubepods/podU/ctr"}}

func groupKill(seq, us int, prefix string, pid int, comm string) string {
	return fmt.Sprintf("3,%d,%d,-;%s: Killed process %d (%s) total-vm:2260kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:28kB oom_score_adj:-997", seq, us, prefix, pid, comm)
}

func TestParserKills(t *testing.T) {
	for _, tc := range []struct {
		name    string
		records []string
		want    []Kill
	}{
		{"memcg", []string{memcgLine, "4,9,9,-;some other line", memcgKill}, []Kill{{Seq: 901, Time: 1000100 * time.Microsecond,
			Constraint: "CONSTRAINT_MEMCG", OOMMemcg: "/kubepods/podU/ctr", TaskMemcg: "/kubepods/podU/ctr", Readings: ctrReading, Pid: 4242, Comm: "python3", ScoreAdj: 900, RSSKiB: 2304, PgTablesKiB: 80}}},
		{"global", []string{globalLine, globalKill}, []Kill{{Seq: 903, Time: 2000100 * time.Microsecond,
			Constraint: "CONSTRAINT_NONE", TaskMemcg: "/system.slice/sshd.service", Readings: []Memcgs{{Task: "/system.slice/sshd.service"}}, Pid: 77, Comm: "sshd", RSSKiB: 1000, PgTablesKiB: 40}}},
		{"killed line alone", []string{globalKill}, []Kill{{Seq: 903, Time: 2000100 * time.Microsecond, Pid: 77, Comm: "sshd", RSSKiB: 1000, PgTablesKiB: 40}}},
		{"oom-kill line of another pid", []string{memcgLine, globalKill}, []Kill{{Seq: 903, Time: 2000100 * time.Microsecond, Pid: 77, Comm: "sshd", RSSKiB: 1000, PgTablesKiB: 40}}},
		// A task's name is its own: it cannot move the pid, the score or the cgroups.
		{"name forging fields", []string{
			"6,1,1,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=a,mems_allowed=0,oom_memcg=/kubepods/podU/ctr,task_memcg=/kubepods/podU/ctr,task=x,pid=1,task_memcg=/system.slice,pid=4242,uid=0",
			"3,2,2,-;Memory cgroup out of memory: Killed process 4242 (a) oom_score_adj:-1000) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:900",
		}, []Kill{{Seq: 2, Time: 2 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", OOMMemcg: "/kubepods/podU/ctr", TaskMemcg: "/kubepods/podU/ctr", Readings: ctrReading,
			Pid: 4242, Comm: "a) oom_score_adj:-1000", ScoreAdj: 900, RSSKiB: 1, PgTablesKiB: 1}}},
		// A pod names its own cgroups: a child of A named so that the line
		// reads as B's is A's, as holding cgroups tell.
		{"cgroup name forging task_memcg", []string{
			"6,1,1,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=a,mems_allowed=0,oom_memcg=/kubepods/podU/A,task_memcg=/kubepods/podU/A/x,task_memcg=/kubepods/podU/B,task=hog,pid=4242,uid=0",
			"3,2,2,-;Memory cgroup out of memory: Killed process 4242 (hog) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:900",
		}, []Kill{{Seq: 2, Time: 2 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", OOMMemcg: "/kubepods/podU/A", TaskMemcg: "/kubepods/podU/A/x,task_memcg=/kubepods/podU/B",
			Readings: []Memcgs{{OOM: "/kubepods/podU/A", Task: "/kubepods/podU/A/x,task_memcg=/kubepods/podU/B"}}, Pid: 4242, Comm: "hog", ScoreAdj: 900, RSSKiB: 1, PgTablesKiB: 1}}},
		// A cpuset name cannot hold '/': what it forges reads as no path.
		{"cpuset name forging the cgroups", []string{
			"6,1,1,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=x,mems_allowed=0,global_oom,task_memcg=,mems_allowed=0,global_oom,task_memcg=/kubepods/podU/A,task=hog,pid=4242,uid=0",
			"3,2,2,-;Out of memory: Killed process 4242 (hog) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:900",
		}, []Kill{{Seq: 2, Time: 2 * time.Microsecond, Constraint: "CONSTRAINT_NONE", TaskMemcg: "/kubepods/podU/A", Readings: []Memcgs{{Task: "/kubepods/podU/A"}},
			Pid: 4242, Comm: "hog", ScoreAdj: 900, RSSKiB: 1, PgTablesKiB: 1}}},
		// Names nested to forge a whole second reading: both are read, and
		// the caller is told it cannot tell from the text alone.
		{"a second reading forged", []string{
			"6,1,1,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=a,mems_allowed=0,oom_memcg=/k/A,task_memcg=/k/A/x,mems_allowed=0,oom_memcg=/k/B,task_memcg=/k/B,task=hog,pid=4242,uid=0",
			"3,2,2,-;Memory cgroup out of memory: Killed process 4242 (hog) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:900",
		}, []Kill{{Seq: 2, Time: 2 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", Readings: []Memcgs{
			{OOM: "/k/A", Task: "/k/A/x,mems_allowed=0,oom_memcg=/k/B,task_memcg=/k/B"}, {OOM: "/k/B", Task: "/k/B"}},
			Pid: 4242, Comm: "hog", ScoreAdj: 900, RSSKiB: 1, PgTablesKiB: 1}}},
		// The kernel cuts a record at 1 KiB: the task part of a line of
		// long cgroup names is lost, and the kill reads as one without it.
		{"cut at 1 KiB", []string{
			"6,1,1,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=a,mems_allowed=0,oom_memcg=/k/A/" + strings.Repeat("n", 900),
			"3,2,2,-;Memory cgroup out of memory: Killed process 4242 (hog) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:900",
		}, []Kill{{Seq: 2, Time: 2 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", Pid: 4242, Comm: "hog", ScoreAdj: 900, RSSKiB: 1, PgTablesKiB: 1}}},
		{"escaped name", []string{strings.Replace(memcgKill, "(python3)", `(\x1b[2Jx)`, 1)}, []Kill{{Seq: 901, Time: 1000100 * time.Microsecond,
			Constraint: "CONSTRAINT_MEMCG", Pid: 4242, Comm: `\x1b[2Jx`, ScoreAdj: 900, RSSKiB: 2304, PgTablesKiB: 80}}},
		// memory.oom.group: the kernel kills the rest of the victim's cgroup,
		// and the victim again, as the 6.1 kernel logged it in the VM.
		{"group kill", []string{memcgLine, memcgKill, groupLine, groupKill(904, 1000200, "Memory cgroup out of memory", 4200, "init"),
			groupKill(905, 1500000, "Memory cgroup out of memory", 4242, "python3")}, []Kill{
			{Seq: 901, Time: 1000100 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", OOMMemcg: "/kubepods/podU/ctr", TaskMemcg: "/kubepods/podU/ctr", Readings: ctrReading, Pid: 4242, Comm: "python3", ScoreAdj: 900, RSSKiB: 2304, PgTablesKiB: 80},
			{Seq: 904, Time: 1000200 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", GroupOf: "/kubepods/podU/ctr", Pid: 4200, Comm: "init", ScoreAdj: -997, RSSKiB: 4, PgTablesKiB: 28},
			{Seq: 905, Time: 1500000 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", OOMMemcg: "/kubepods/podU/ctr", TaskMemcg: "/kubepods/podU/ctr", Readings: ctrReading, Pid: 4242, Comm: "python3", ScoreAdj: 900, RSSKiB: 2304, PgTablesKiB: 80, Again: true}}},
		{"global group kill", []string{globalLine, strings.Replace(globalKill, "sshd", "hog", 1), strings.Replace(groupLine, "1000150", "2000150", 1),
			groupKill(904, 2000200, "Memory cgroup out of memory", 4200, "init")}, []Kill{
			{Seq: 903, Time: 2000100 * time.Microsecond, Constraint: "CONSTRAINT_NONE", TaskMemcg: "/system.slice/sshd.service", Readings: []Memcgs{{Task: "/system.slice/sshd.service"}}, Pid: 77, Comm: "hog", RSSKiB: 1000, PgTablesKiB: 40},
			{Seq: 904, Time: 2000200 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", GroupOf: "/kubepods/podU/ctr", Pid: 4200, Comm: "init", ScoreAdj: -997, RSSKiB: 4, PgTablesKiB: 28}}},
		// Past the window, a kill without its oom-kill line (rate-limited) is its own.
		{"after the group", []string{memcgLine, memcgKill, groupLine, groupKill(904, 3000000, "Memory cgroup out of memory", 4242, "python3")}, []Kill{
			{Seq: 901, Time: 1000100 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", OOMMemcg: "/kubepods/podU/ctr", TaskMemcg: "/kubepods/podU/ctr", Readings: ctrReading, Pid: 4242, Comm: "python3", ScoreAdj: 900, RSSKiB: 2304, PgTablesKiB: 80},
			{Seq: 904, Time: 3000000 * time.Microsecond, Constraint: "CONSTRAINT_MEMCG", Pid: 4242, Comm: "python3", ScoreAdj: -997, RSSKiB: 4, PgTablesKiB: 28}}},
		{"a group line alone", []string{groupLine, groupKill(904, 1000200, "Out of memory", 4200, "init")}, []Kill{
			{Seq: 904, Time: 1000200 * time.Microsecond, Pid: 4200, Comm: "init", ScoreAdj: -997, RSSKiB: 4, PgTablesKiB: 28}}},
		// A process writing /dev/kmsg gets the user facility (1): never a kill.
		{"forged by a process", []string{"14,5,5,-;" + strings.SplitN(globalKill, ";", 2)[1]}, nil},
		{"not the OOM killer", []string{"3,1,1,-;Killed process 1 (x) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Parser
			var got []Kill
			for _, s := range tc.records {
				if k, ok := p.Feed(rec(t, s)); ok {
					got = append(got, k)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("kills %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if !reflect.DeepEqual(got[i], tc.want[i]) {
					t.Errorf("kill %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// A group kill meets a process whose leader exited meanwhile a second time,
// and prints it through a thread: its id and name, the process's figures.
// The kernel's records below are those of CRI-O 1.36.3 on 6.12 in the VM
// (a Go hog that renamed its main thread only, and two sleeps).
func TestParserGroupRepeats(t *testing.T) {
	const fig = "total-vm:1259452kB, anon-rss:32084kB, file-rss:1100kB, shmem-rss:0kB, UID:0 pgtables:148kB oom_score_adj:988"
	const sleepFig = "total-vm:2408kB, anon-rss:88kB, file-rss:1024kB, shmem-rss:0kB, UID:0 pgtables:44kB oom_score_adj:988"
	killed := func(seq, pid int, comm, fig string) string {
		return fmt.Sprintf("3,%d,%d,-;Memory cgroup out of memory: Killed process %d (%s) %s", seq, 5000000+seq, pid, comm, fig)
	}
	head := []string{
		"6,1,5000001,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/k/podG/c,task_memcg=/k/podG/c,task=grp-hog,pid=3271,uid=0",
		killed(2, 3271, "grp-hog", fig),
		"6,3,5000003,-;Tasks in /k/podG/c are going to be killed due to memory.oom.group set",
		killed(4, 3271, "grp-hog", fig),
	}
	for _, tc := range []struct {
		name    string
		records []string
		threads map[[2]int]bool // {pid, tid}: known, same
		want    []string
	}{
		// Gone from /proc, the thread is no proven repeat: its own kill,
		// with the processes it may repeat (their figures).
		{"the victim through a renamed thread, gone", append(head[:4:4], killed(5, 3300, "sleep", sleepFig), killed(6, 3301, "sleep", sleepFig), killed(7, 3716, "hog", fig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "3300 sleep", "3301 sleep may repeat [3300]", "3716 hog may repeat [3271]"}},
		{"the victim through a renamed thread, still there", append(head[:4:4], killed(5, 3300, "sleep", sleepFig), killed(6, 3301, "sleep", sleepFig), killed(7, 3716, "hog", fig)),
			map[[2]int]bool{{3271, 3716}: true, {3300, 3301}: false}, []string{"3271 grp-hog", "3271 grp-hog again", "3300 sleep", "3301 sleep", "3271 grp-hog again"}},
		// Idle copies of one program: the same figures, each its own process.
		{"copies of one program", append(head[:4:4], killed(5, 3300, "sleep", sleepFig), killed(6, 3301, "sleep", sleepFig), killed(7, 3302, "sleep", sleepFig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "3300 sleep", "3301 sleep may repeat [3300]", "3302 sleep may repeat [3300 3301]"}},
		{"a copy again by its pid", append(head[:4:4], killed(5, 3300, "sleep", sleepFig), killed(6, 3301, "sleep", sleepFig), killed(7, 3301, "sleep", sleepFig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "3300 sleep", "3301 sleep may repeat [3300]", "3301 sleep again"}},
		{"a thread of the same name, still there", append(head[:4:4], killed(5, 3716, "grp-hog", fig)),
			map[[2]int]bool{{3271, 3716}: true}, []string{"3271 grp-hog", "3271 grp-hog again", "3271 grp-hog again"}},
		{"another process, still there", append(head[:4:4], killed(5, 3716, "hog", fig)),
			map[[2]int]bool{{3271, 3716}: false}, []string{"3271 grp-hog", "3271 grp-hog again", "3716 hog"}},
		{"a member through its thread", append(head[:4:4], killed(5, 3300, "worker", sleepFig), killed(6, 3310, "worker-io", sleepFig)),
			map[[2]int]bool{{3300, 3310}: true}, []string{"3271 grp-hog", "3271 grp-hog again", "3300 worker", "3300 worker again"}},
		// Within a second of A's group kill, another pod's kill whose oom-kill
		// record the rate limit dropped, with the figures of one of A's
		// members and another name: a pid never printed in the group, never
		// proven one of its processes, is a kill of its own.
		{"another pod's kill with a member's figures", append(head[:4:4], killed(5, 3300, "sleep", sleepFig), killed(6, 4400, "worker", sleepFig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "3300 sleep", "4400 worker may repeat [3300]"}},
		{"another pod's kill with the victim's figures", append(head[:4:4], killed(5, 4400, "hog", fig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "4400 hog may repeat [3271]"}},
		// Another pod's victim in the second, its oom-kill record dropped,
		// then its own group kill: its repeat is of it, not of the first.
		{"another group's victim without its record", append(head[:4:4], killed(5, 4400, "other", sleepFig),
			"6,6,5000006,-;Tasks in /k/podH/c are going to be killed due to memory.oom.group set",
			killed(7, 4401, "other-w", fig), killed(8, 4400, "other", sleepFig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "4400 other", "4401 other-w", "4400 other again"}},
		// A record with its own oom-kill line names its own cgroup: its own
		// kill, whatever its pid and figures.
		{"a record from another cgroup", append(head[:4:4],
			"6,5,5000005,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/k/podH/c,task_memcg=/k/podH/c,task=grp-hog,pid=3271,uid=0",
			killed(6, 3271, "grp-hog", fig), killed(7, 3300, "sleep", sleepFig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "3271 grp-hog", "3300 sleep"}},
		// The next group kill starts its own list.
		{"another group's copy", append(head[:4:4], killed(5, 3300, "sleep", sleepFig),
			"6,6,7000000,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/k/podH/c,task_memcg=/k/podH/c,task=hog,pid=4000,uid=0",
			killed(7, 4000, "hog", fig),
			"6,8,7000002,-;Tasks in /k/podH/c are going to be killed due to memory.oom.group set",
			killed(9, 4001, "sleeper", sleepFig)),
			nil, []string{"3271 grp-hog", "3271 grp-hog again", "3300 sleep", "4000 hog", "4001 sleeper"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Parser
			if tc.threads != nil {
				p.SameProcess = func(pid, tid int) (bool, bool) {
					same, known := tc.threads[[2]int{pid, tid}]
					return same, known
				}
			}
			var got []string
			for _, s := range tc.records {
				if k, ok := p.Feed(rec(t, s)); ok {
					g := fmt.Sprintf("%d %s", k.Pid, k.Comm)
					if k.Again {
						g += " again"
					}
					if len(k.MayRepeat) > 0 {
						g += fmt.Sprintf(" may repeat %v", k.MayRepeat)
					}
					got = append(got, g)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("kills %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGlobal(t *testing.T) {
	for c, want := range map[string]bool{"": true, "CONSTRAINT_NONE": true, "CONSTRAINT_MEMCG": false, "CONSTRAINT_CPUSET": false} {
		if (Kill{Constraint: c}).Global() != want {
			t.Errorf("%q: Global %v", c, !want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{memcgLine, memcgKill, globalLine, globalKill, groupLine, "6,1;x", "",
		groupKill(905, 1000300, "Memory cgroup out of memory", 6100, "worker")} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			return
		}
		var p Parser
		p.Feed(r)
		k, ok := p.Feed(r)
		if ok && k.Pid < 0 {
			t.Fatalf("negative pid from %q", b)
		}
		for _, rd := range k.Readings {
			if !strings.HasPrefix(rd.Task, "/") || rd.OOM != "" && !holds(rd.OOM, rd.Task) {
				t.Fatalf("reading %+v from %q", rd, b)
			}
		}
		if len(k.Readings) != 1 && (k.TaskMemcg != "" || k.OOMMemcg != "") {
			t.Fatalf("cgroups %q %q from %d readings of %q", k.OOMMemcg, k.TaskMemcg, len(k.Readings), b)
		}
	})
}

// A reader that takes over another's place in the log starts a new parser
// after the last record at which the old one's was clean: from there on it
// finds exactly the kills the old parser would have found. Clean is false
// while a kill's lines are incomplete (its oom-kill line read, not its
// Killed process line) and while a group kill may still name its members.
func TestParserCleanResumes(t *testing.T) {
	records := []string{
		"6,800,500000,-;some line",
		memcgLine, memcgKill, groupLine,
		groupKill(904, 1000200, "Memory cgroup out of memory", 4200, "init"),
		groupKill(905, 1000300, "Memory cgroup out of memory", 4242, "python3"),
		"6,906,1500000,-;another line",
		"6,907,2500000,-;a line after the group's window",
		strings.Replace(globalLine, "6,902,2000000", "6,908,3000000", 1),
		strings.Replace(globalKill, "3,903,2000100", "3,909,3000100", 1),
		"6,910,4500000,-;a quiet line",
	}
	var whole Parser
	type fed struct {
		clean bool
		kills []Kill // what the whole parser found from the next record on
	}
	steps := make([]fed, len(records))
	var all []Kill
	var at []int // the record index of each kill in all
	for i, s := range records {
		r := rec(t, s)
		if k, ok := whole.Feed(r); ok {
			all, at = append(all, k), append(at, i)
		}
		steps[i].clean = whole.Clean(r.Time)
	}
	for i := range steps {
		for j, k := range all {
			if at[j] > i {
				steps[i].kills = append(steps[i].kills, k)
			}
		}
	}
	wantClean := []bool{true, false, false, false, false, false, false, true, false, false, true}
	for i := range steps {
		if steps[i].clean != wantClean[i] {
			t.Errorf("after record %d (%.40q): clean %v, want %v", i, records[i], steps[i].clean, wantClean[i])
		}
		if !steps[i].clean {
			continue
		}
		var resumed Parser
		var got []Kill
		for _, s := range records[i+1:] {
			if k, ok := resumed.Feed(rec(t, s)); ok {
				got = append(got, k)
			}
		}
		if !reflect.DeepEqual(got, steps[i].kills) {
			t.Errorf("resumed after record %d: kills\n%+v\nwant\n%+v", i, got, steps[i].kills)
		}
	}
}

// Records in any order and any number, /proc telling nothing (every
// process gone): a kill is a repeat only of a process printed with its
// very pid, and may repeat only processes printed before it.
func FuzzParserRepeats(f *testing.F) {
	const fig = "total-vm:2260kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:28kB oom_score_adj:-997"
	group := []string{memcgLine, memcgKill, groupLine,
		groupKill(904, 1000200, "Memory cgroup out of memory", 4200, "init"),
		// Another pod's kill without its oom-kill record, with init's figures.
		groupKill(905, 1000300, "Memory cgroup out of memory", 6100, "worker"),
		groupKill(906, 1000400, "Memory cgroup out of memory", 4242, "python3"),
		groupKill(907, 1000500, "Memory cgroup out of memory", 4201, "init")}
	f.Add([]byte(strings.Join(group, "\x00")))
	f.Add([]byte(strings.Join(group[:5], "\x00")))
	f.Add([]byte(strings.Join(append(group[:4:4], groupKill(905, 1000300, "Memory cgroup out of memory", 4201, "init"),
		groupKill(906, 1000400, "Memory cgroup out of memory", 4201, "init")), "\x00")))
	f.Add([]byte(strings.Join([]string{memcgLine, memcgKill, groupLine, "3,904,1000200,-;Memory cgroup out of memory: Killed process 4300 (hog) " + fig,
		strings.Replace(memcgLine, "4242", "4300", 1), "3,905,1000300,-;Memory cgroup out of memory: Killed process 4300 (hog) " + fig}, "\x00")))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := Parser{SameProcess: func(int, int) (bool, bool) { return false, false }}
		printed := map[int]bool{}
		for _, s := range bytes.Split(b, []byte{0}) {
			r, err := ParseRecord(s)
			if err != nil {
				continue
			}
			k, ok := p.Feed(r)
			if !ok {
				continue
			}
			if k.Again && (!printed[k.Pid] || !strings.Contains(r.Msg, fmt.Sprintf(" Killed process %d (", k.Pid)) || len(k.MayRepeat) > 0) {
				t.Fatalf("kill %+v from %q: a repeat not proven", k, r.Msg)
			}
			if len(k.MayRepeat) > maxMayRepeat || len(k.MayRepeat) > 0 && k.GroupOf == "" {
				t.Fatalf("kill %+v from %q: may repeat %v", k, r.Msg, k.MayRepeat)
			}
			for _, pid := range k.MayRepeat {
				if !printed[pid] || pid == k.Pid {
					t.Fatalf("kill %+v from %q: may repeat %d, never printed before", k, r.Msg, pid)
				}
			}
			if !k.Again {
				printed[k.Pid] = true
			}
		}
	})
}
