package kernel

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestParseStart(t *testing.T) {
	for stat, want := range map[string]struct {
		comm  string
		start uint64
		bad   bool
	}{
		"412 (containerd) S 1 412 412 0 -1 4194560 9 0 0 0 2 3 0 0 20 0 11 0 1843 2045 12\n": {comm: "containerd", start: 1843},
		"7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 1 1\n":                       {comm: "a) b (c", start: 99},
		"7 (sh) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0\n":                                   {bad: true},
		"7 (sh) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5 1\n":                              {bad: true},
		"7 sh S": {bad: true},
	} {
		comm, start, err := parseStart([]byte(stat))
		if (err != nil) != want.bad || comm != want.comm && !want.bad || start != want.start {
			t.Errorf("%q: %q %d %v, want %+v", stat, comm, start, err, want)
		}
	}
}

// A process is named by pid, comm and start together: the same pid with
// another start is another process; the runtime's processes are found by
// comm, oldest first; the boot time places a start in time.
func TestStarted(t *testing.T) {
	root := t.TempDir()
	proc := func(pid int, comm string, start int) {
		d := filepath.Join(root, "proc", strconv.Itoa(pid))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "stat"), []byte(strconv.Itoa(pid)+" ("+comm+") S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "+strconv.Itoa(start)+" 1 1\n"), 0o644)
	}
	proc(1, "systemd", 1)
	proc(30, "containerd", 900)
	proc(12, "containerd", 500)
	proc(40, "containerd-shim", 950)
	os.WriteFile(filepath.Join(root, "proc", "stat"), []byte("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"), 0o644)
	found, err := FindComm(root, "containerd")
	if err != nil || len(found) != 2 || found[0].PID != 12 || found[1].PID != 30 {
		t.Fatalf("FindComm: %+v %v", found, err)
	}
	if !found[1].Running(root) {
		t.Fatal("pid 30 runs as it was found")
	}
	proc(30, "containerd", 1200) // restarted, the same pid again
	if found[1].Running(root) {
		t.Fatal("pid 30 started again is another process")
	}
	os.RemoveAll(filepath.Join(root, "proc", "12"))
	if found[0].Running(root) {
		t.Fatal("pid 12 is gone")
	}
	boot, err := BootTime(root)
	if err != nil || !boot.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("BootTime: %v %v", boot, err)
	}
	if got := found[1].StartTime(boot); !got.Equal(time.Unix(1700000009, 0)) {
		t.Fatalf("StartTime: %v", got)
	}
}
