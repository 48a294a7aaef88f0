package kernel

import (
	"fmt"
	"testing"
)

func TestMeminfo(t *testing.T) {
	root := tree(t, map[string]string{"proc/meminfo": "MemTotal:       16384000 kB\nMemFree: 100 kB\nMemAvailable:    8192000 kB\nSwapTotal:       1024 kB\nSwapFree: 0 kB\n"})
	m, err := ReadMeminfo(root)
	if err != nil || m.TotalKB != 16384000 || m.AvailableKB != 8192000 || m.SwapKB != 1024 || m.TotalPages() != (16384000+1024)/PageKB {
		t.Fatalf("%+v %v", m, err)
	}
	if _, err := ReadMeminfo(t.TempDir()); err == nil {
		t.Fatal("no meminfo must be an error")
	}
}

// proc is one fake process for FirstVictim's tables.
type proc struct {
	pid, adj int
	comm     string
	rssKB    int
	kernel   bool
	fileKB   int // of rssKB
}

func procTree(t *testing.T, ps ...proc) string {
	files := map[string]string{"proc/meminfo": "MemTotal: 4096000 kB\nMemAvailable: 100 kB\nSwapTotal: 0 kB\n"}
	for _, p := range ps {
		d := fmt.Sprintf("proc/%d/", p.pid)
		flags := 4194560
		if p.kernel {
			flags = 2129984
		}
		files[d+"stat"] = fmt.Sprintf("%d (%s) S 1 1 1 0 -1 %d 0 0\n", p.pid, p.comm, flags)
		files[d+"cmdline"] = p.comm + "\x00"
		files[d+"status"] = fmt.Sprintf("Name:\t%s\nVmRSS:\t%d kB\nRssFile:\t%d kB\nVmPTE:\t0 kB\nVmSwap:\t0 kB\n", p.comm, p.rssKB, p.fileKB)
		files[d+"oom_score_adj"] = fmt.Sprint(p.adj)
		files[d+"cgroup"] = "0::/\n"
	}
	return tree(t, files)
}

func TestFirstVictim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs []proc
		skip  int
		want  string // "" for none
	}{
		{"the biggest at equal scores", []proc{{2, 0, "small", 1000, false, 0}, {3, 0, "big", 9000, false, 0}}, 0, "big"},
		{"a score outweighs memory", []proc{{2, 0, "sshd", 900000, false, 0}, {3, 900, "app", 1000, false, 0}}, 0, "app"},
		{"-997 under a daemon", []proc{{2, 0, "sshd", 9000, false, 0}, {3, -997, "hog", 3000000, false, 0}}, 0, "sshd"},
		{"never -1000, init or a kernel thread", []proc{{1, 1000, "init", 9000, false, 0}, {2, -1000, "x", 9000, false, 0}, {4, 1000, "kthreadd", 0, true, 0}}, 0, ""},
		// The VM: the kernel chose sshd (11,984 kB, file-rss:0kB); agetty
		// read 12,116 kB after it, and held 11,960 at its own kill, file-rss:0kB.
		{"file pages do not count", []proc{{2, 0, "sshd", 11984, false, 0}, {3, 0, "agetty", 12116, false, 156}}, 0, "sshd"},
		{"the victim skipped", []proc{{2, 0, "sshd", 9000, false, 0}, {3, 1000, "hog", 1000, false, 0}}, 3, "sshd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, ok, err := FirstVictim(procTree(t, tc.procs...), ModeV2, tc.skip)
			if err != nil {
				t.Fatal(err)
			}
			if got := map[bool]string{true: p.Comm}[ok]; got != tc.want {
				t.Fatalf("first victim %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCounterSlack(t *testing.T) {
	for _, tc := range []struct {
		cpus int
		want int64
	}{{0, 32}, {1, 32}, {2, 64}, {16, 512}, {32, 2048}, {64, 8192}} {
		if got := CounterSlack(tc.cpus); got != tc.want {
			t.Errorf("CounterSlack(%d) = %d, want %d", tc.cpus, got, tc.want)
		}
	}
}
