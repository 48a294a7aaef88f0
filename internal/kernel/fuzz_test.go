package kernel

import (
	"strings"
	"testing"
)

// The files under /proc and /sys a node or a captured tree hands the doctor
// and the plugin: no content makes a parser panic or return more than the
// file could hold.

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0\n"))
	f.Add([]byte("42 (a) b) (c) R 7 42 42 0 -1 2097152 0\n"))
	f.Add([]byte("9 (x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		comm, _, _, err := parseStat(b)
		if err == nil && len(comm) > len(b) {
			t.Fatalf("comm %q longer than the file", comm)
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8,10-11", "0-200000000", "5-1", "-1", "0,0,0", "3,4096-8000000", ""} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, ncpu int) {
		cpus, err := ParseCPUList(s, ncpu)
		bound := ncpu
		if bound <= 0 || bound > MaxCPUs {
			bound = MaxCPUs
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
	f.Add([]byte("0::/kubepods.slice/x\n4:memory:/a\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		irqs, _ := parseInterrupts(b)
		for _, in := range irqs {
			if len(in.Counts) > MaxCPUs {
				t.Fatalf("%d counts on a line", len(in.Counts))
			}
		}
		times, _ := parseCPUTimes(b)
		for _, c := range times {
			if c.CPU < -1 || c.CPU >= MaxCPUs {
				t.Fatalf("CPU %d", c.CPU)
			}
		}
		parseConsoles(b)
		parseCmdlineParams(b)
		for _, mode := range []Mode{ModeV1, ModeHybrid, ModeV2} {
			if cg, err := cgroupLineBytes(b, mode); err == nil && !strings.Contains(string(b), cg) {
				t.Fatalf("cgroup %q is not in the file", cg)
			}
		}
	})
}

// /proc/PID/status and /proc/meminfo: a process names itself in them (Name:
// is its comm), so a kB value is never negative and nothing panics.
func FuzzStatusKB(f *testing.F) {
	f.Add([]byte("Name:\tVmRSS: 99 kB\nVmRSS:\t  4096 kB\nVmSwap:\t0 kB\n"), "VmRSS:")
	f.Add([]byte("MemTotal: -5 kB\n"), "MemTotal:")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		if v := statusKB(b, key); v < 0 {
			t.Fatalf("%q %q: %d", b, key, v)
		}
	})
}
