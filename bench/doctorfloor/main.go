// Command doctorfloor reads, for every process under ROOT/proc, the files
// oomguard-doctor reads, with the doctor's parallelism, and does nothing with
// them: the least a report on that node can cost.
//
//	doctorfloor ROOT
package main

import (
	"os"
	"strconv"
	"sync"
	"syscall"
)

var files = []string{"stat", "cmdline", "status", "oom_score_adj", "cgroup"}

func main() {
	root := os.Args[1]
	ents, err := os.ReadDir(root + "/proc")
	if err != nil {
		os.Exit(1)
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	const workers = 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := w; i < len(pids); i += workers {
				dir := root + "/proc/" + strconv.Itoa(pids[i]) + "/"
				for _, f := range files {
					read(dir+f, buf)
				}
			}
		}()
	}
	wg.Wait()
	for _, f := range []string{"proc/meminfo", "proc/sys/vm/oom_dump_tasks", "proc/consoles", "proc/cmdline", "proc/sys/kernel/printk", "proc/interrupts", "proc/stat", "sys/fs/cgroup/cgroup.stat"} {
		read(root+"/"+f, make([]byte, 4096))
	}
}

func read(p string, buf []byte) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	for {
		n, err := syscall.Read(fd, buf)
		if n <= 0 || err != nil {
			break
		}
	}
	syscall.Close(fd)
}
