package oomkills

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// lookup is a test's containers, each at its own cgroup.
type lookup struct {
	mu   sync.Mutex
	ctrs map[string]*Container
}

func (l *lookup) Container(id string) (Container, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.ctrs[id]; ok {
		return *c, true
	}
	return Container{}, false
}

func (l *lookup) At(cg string) (Container, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.ctrs {
		if cg == c.CgroupsPath || strings.HasPrefix(cg, c.CgroupsPath+"/") {
			return *c, true
		}
	}
	return Container{}, false
}

func (l *lookup) Counted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, c := range l.ctrs {
		if c.Books.Counted {
			ids = append(ids, id)
		}
	}
	return ids
}

func (l *lookup) UpdateBooks(id string, f func(*Books)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.ctrs[id]
	if ok {
		f(&c.Books)
	}
	return ok
}

// cgroupV2Node is a cgroup v2 tree of n new containers (their kills
// counted from 0) in pods p0, p1, …, each named main; the node counted no
// kill yet.
func cgroupV2Node(t testing.TB, n int) (root string, ctrs *lookup) {
	t.Helper()
	root = t.TempDir()
	write := func(p, c string) {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/fs/cgroup/cgroup.controllers", "cpu memory pids")
	write("proc/vmstat", "oom_kill 0\n")
	ctrs = &lookup{ctrs: map[string]*Container{}}
	for i := range n {
		id := fmt.Sprintf("ctr%d", i)
		cg := fmt.Sprintf("/kubepods/podp%d/%s", i, id)
		write("sys/fs/cgroup"+cg+"/memory.events", "oom 0\noom_kill 0\n")
		ctrs.ctrs[id] = &Container{ID: id, Namespace: "ml", Pod: fmt.Sprintf("p%d", i), Name: "main", CgroupsPath: cg, Books: Books{Counted: true}}
	}
	return root, ctrs
}

// setKills sets the kills the kernel counted in a container's cgroup, or the node's ("").
func setKills(t testing.TB, root, cg string, n int) {
	t.Helper()
	p, s := filepath.Join(root, "proc/vmstat"), fmt.Sprintf("oom_kill %d\n", n)
	if cg != "" {
		p, s = filepath.Join(root, "sys/fs/cgroup", cg, "memory.events"), fmt.Sprintf("oom %d\noom_kill %d\n", n, n)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
