package doctor

import (
	"math"
	"testing"

	"github.com/oomguard/oomguard/internal/kernel"
)

// Linux 6.1's arithmetic (oom_badness, proc_oom_score), for 4 KiB pages,
// checked against numbers a real kernel showed: the VM scenario compares
// the doctor's scores with /proc/PID/oom_score on every process.
func TestOOMArithmetic(t *testing.T) {
	if kernel.PageKB != 4 {
		t.Skip("the figures are for 4 KiB pages")
	}
	total := int64(201326592 / 4) // 192 GiB, no swap
	for _, tc := range []struct {
		memKB int64
		adj   int
		score int
	}{
		{9 << 10, 0, 666},      // a small daemon at 0: not 0 or 1, as fixtures once had
		{2 << 20, -997, 9},     // 2 GiB at -997
		{1 << 10, 1000, 1332},  // a BestEffort sleep
		{0, -1000, 0},          // never chosen
		{190 << 20, -997, 662}, // grown to nearly the whole node
		{120 << 10, -999, 1},   // kubelet
	} {
		b := kernel.Badness(tc.memKB, tc.adj, total)
		if got := oomScore(b, total); got != tc.score {
			t.Errorf("%d kB at %d: score %d, want %d (badness %d)", tc.memKB, tc.adj, got, tc.score, b)
		}
	}
	if kernel.Badness(0, -1000, total) != math.MinInt64 {
		t.Error("oom_score_adj -1000 must never be chosen")
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8,10-11", "0-200000000", "5-1", "-1", "0,0,0", "3,4096-8000000", ""} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, ncpu int) {
		cpus, err := parseCPUList(s, ncpu)
		bound := ncpu
		if bound <= 0 || bound > maxCPUs {
			bound = maxCPUs
		}
		if err == nil && len(cpus) > bound {
			t.Fatalf("%q gave %d CPUs on a node of %d", s, len(cpus), bound)
		}
		for _, c := range cpus {
			if c < 0 || c >= bound {
				t.Fatalf("%q gave CPU %d on a node of %d", s, c, bound)
			}
		}
	})
}

func FuzzParseProcTables(f *testing.F) {
	f.Add([]byte("           CPU0       CPU1\n  0:         40          0   IO-APIC   2-edge      timer\n1795: 0 22511345 PCI-MSI 2097153-edge eth0-Tx-Rx-1\nNMI: 0 0 Non-maskable\n"))
	f.Add([]byte("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 25 0 25 200 0 0 0 0 0 0\ncpu99999999999 1 1 1 1 1 1 1 1\n"))
	f.Add([]byte("ttyS0 -W- (EC p a) 4:64\ntty0 -WU (E p ) 4:1\n"))
	f.Add([]byte("BOOT_IMAGE=/vmlinuz console=ttyS0,115200n8 quiet\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		irqs, _ := parseInterrupts(b)
		for _, in := range irqs {
			if len(in.Counts) > maxCPUs {
				t.Fatalf("%d counts on a line", len(in.Counts))
			}
		}
		times, _ := parseCPUTimes(b)
		for _, c := range times {
			if c.CPU < -1 || c.CPU >= maxCPUs {
				t.Fatalf("CPU %d", c.CPU)
			}
		}
		parseConsoles(b)
		parseCmdlineParams(b)
	})
}
