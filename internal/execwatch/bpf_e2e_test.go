//go:build e2e

package execwatch

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup2 is a cgroup v2 hierarchy to make cgroups in: the host's, or one
// mounted for the test beside a cgroup v1 host's (a hybrid: no controllers).
func cgroup2(t *testing.T) string {
	t.Helper()
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "/sys/fs/cgroup"
	}
	dir := t.TempDir()
	if err := unix.Mount("none", dir, "cgroup2", 0, ""); err != nil {
		t.Skipf("no cgroup v2 hierarchy: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// newCgroup makes a cgroup and returns its path and id.
func newCgroup(t *testing.T, parent, name string) (string, uint64) {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return dir, st.Ino
}

// inCgroup runs script in a shell that first moves itself into cg.
func inCgroup(t *testing.T, cg, script string) int {
	t.Helper()
	c := exec.Command("sh", "-c", "echo $$ > "+filepath.Join(cg, "cgroup.procs")+"; "+script)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return c.Process.Pid
}

// The kernel passes on the execs and process forks under a watched cgroup
// (and its descendants) and nothing else.
func TestE2EFilteredPassesOnlyWatchedCgroups(t *testing.T) {
	f, err := OpenFiltered()
	if err != nil {
		t.Skipf("eBPF unavailable here: %v", err)
	}
	defer f.Close()
	root := cgroup2(t)
	top, _ := newCgroup(t, root, "oomguard-execwatch-test")
	watched, id := newCgroup(t, top, "watched")
	deep, _ := newCgroup(t, watched, "a/b/c")
	other, _ := newCgroup(t, top, "other")
	if err := f.Watch(id); err != nil {
		t.Fatal(err)
	}
	shOther := inCgroup(t, other, "/bin/true; exec /bin/true")
	shWatched := inCgroup(t, watched, "/bin/true; exec /bin/true")
	shDeep := inCgroup(t, deep, "exec /bin/true")
	var evs []Event
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		evs, err = f.Read(evs)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) >= 4 {
			break
		}
	}
	t.Logf("events: %+v", evs)
	var execs, forks int
	for _, e := range evs {
		if e.Cgroup != id {
			t.Errorf("event %+v is not the watched cgroup's (%d)", e, id)
		}
		if e.Pid == shOther || e.Parent == shOther {
			t.Errorf("an event of the unwatched cgroup passed: %+v", e)
		}
		switch {
		case e.Parent == shWatched:
			forks++
		case e.Parent == 0 && (e.Pid == shWatched || e.Pid == shDeep):
			execs++
		}
	}
	// The watched shell forks /bin/true (which execs) and execs /bin/true;
	// the deeper one execs.
	if forks < 1 || execs < 2 {
		t.Fatalf("want the watched shell's fork and both execs of the watched tree; got %d forks, %d execs: %+v", forks, execs, evs)
	}
	f.Unwatch(id)
	inCgroup(t, watched, "exec /bin/true")
	if evs, _ = f.Read(evs[:0]); len(evs) > 0 {
		t.Fatalf("events after Unwatch: %+v", evs)
	}
}

// A plugin that stops closes its exec source from another goroutine while
// its reader may be in Read: Read returns, it does not read the unmapped
// ring (the plugin panicked there as it stopped, before it let the node's
// lock go).
func TestE2EFilteredCloseDuringRead(t *testing.T) {
	for range 20 {
		f, err := OpenFiltered()
		if err != nil {
			t.Skipf("eBPF unavailable here: %v", err)
		}
		done := make(chan error, 1)
		go func() {
			var err error
			for err == nil {
				_, err = f.Read(nil)
			}
			done <- err
		}()
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		f.Close()
		select {
		case err := <-done:
			if !errors.Is(err, errClosed) {
				t.Fatalf("Read after Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Read did not return after Close")
		}
	}
}
