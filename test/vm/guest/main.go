// Command guest is the workload of the VM scenarios. Installed as "hog" it
// allocates memory page by page until the kernel kills it; under any other
// name it is a node daemon at oom_score_adj 0 that holds a few MiB and waits.
package main

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

const chunk = 4 << 20

func main() {
	if filepath.Base(os.Args[0]) == "hog" {
		hog()
	}
	daemon()
}

// hog grows gradually, as a runaway does: a sudden huge allocation would be
// refused by the kernel's overcommit heuristic instead of triggering the OOM killer.
// HOG_COMM, when set, is its name (its comm) before it grows: a process
// names itself as it likes, escape sequences included.
func hog() {
	if c := os.Getenv("HOG_COMM"); c != "" {
		os.WriteFile("/proc/self/comm", []byte(c), 0)
	}
	for {
		b, err := syscall.Mmap(-1, 0, chunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	}
}

// daemon stands for sshd or kubelet: it runs at score 0, like a node daemon,
// whatever its parent had.
func daemon() {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("0\n"), 0); err != nil {
		os.Stderr.WriteString("daemon: " + err.Error() + "\n")
	}
	mb := 8
	if len(os.Args) > 1 {
		if v, err := strconv.Atoi(os.Args[1]); err == nil {
			mb = v
		}
	}
	b := make([]byte, mb<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	for {
		time.Sleep(time.Hour)
		b[0]++
	}
}
