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
	f.Add([]byte("412 (containerd) S 1 412 412 0 -1 4194560 9 0 0 0 2 3 0 0 20 0 11 0 1843 2045 12\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		comm, _, _, err := parseStat(b)
		if err == nil && len(comm) > len(b) {
			t.Fatalf("comm %q longer than the file", comm)
		}
		if comm2, _, err := parseStart(b); err == nil && (comm2 != comm || !strings.Contains(string(b), comm2)) {
			t.Fatalf("parseStart's comm %q, parseStat's %q", comm2, comm)
		}
	})
}

// /proc/PID/cgroup and the flat-keyed cgroup files: what comes out is in
// what went in.
func FuzzParseProcTables(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/x\n4:memory:/a\n"))
	f.Add([]byte("12:pids:/kubepods/pod1/abc\n4:cpu,memory:/kubepods/pod1/abc\n"))
	f.Add([]byte("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, mode := range []Mode{ModeV1, ModeHybrid, ModeV2} {
			if cg, err := CgroupPath(b, mode); err == nil && !strings.Contains(string(b), cg) {
				t.Fatalf("cgroup %q is not in the file", cg)
			}
		}
		kv := KeyValues(b)
		for k, v := range kv {
			if !strings.Contains(string(b), k) {
				t.Fatalf("key %q is not in the file", k)
			}
			if one, ok := KeyValue(b, k); !ok || one != v {
				t.Fatalf("key %q: KeyValue %d, %v; KeyValues %d", k, one, ok, v)
			}
		}
		_, has := kv["oom_kill"]
		if _, ok := KeyValue(b, "oom_kill"); ok != has {
			t.Fatalf("oom_kill: KeyValue found it %v, KeyValues %v", ok, has)
		}
	})
}

// /proc/PID/status and /proc/meminfo: a process names itself in them (Name:
// is its comm), so a kB value is never negative and nothing panics.
func FuzzStatusKB(f *testing.F) {
	f.Add([]byte("Name:\tVmRSS: 99 kB\nVmRSS:\t  4096 kB\nVmSwap:\t0 kB\n"), "VmRSS:")
	f.Add([]byte("MemTotal: -5 kB\n"), "MemTotal:")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		if v := StatusKB(b, key); v < 0 {
			t.Fatalf("%q %q: %d", b, key, v)
		}
	})
}
