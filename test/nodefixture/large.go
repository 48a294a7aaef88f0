package nodefixture

import "fmt"

// Large is a busy GPU node: 100 node daemons and ctrs containers, each a
// shim, an init and workers, procs processes in all, shallow as real
// process trees are; each container's init runs under memory.oom.group = 1.
func Large(procs, ctrs int) ([]Proc, map[string]string) {
	files := map[string]string{
		"sys/fs/cgroup/cgroup.controllers": "cpu memory pids",
		"sys/fs/cgroup/cgroup.stat":        "nr_descendants 1200\nnr_dying_descendants 300\n",
		"proc/sys/vm/oom_dump_tasks":       "1\n",
		"proc/sys/kernel/printk":           "7 4 1 7\n",
		"proc/sys/kernel/osrelease":        "6.1.0\n",
		"proc/consoles":                    "ttyS0 -W- (EC p a) 4:64\n",
		"proc/cmdline":                     "console=ttyS0,115200n8\n",
		"proc/interrupts":                  "  CPU0 CPU1\n 30: 5 100 PCI-MSI 1-edge eth0-Tx-Rx-0\n",
		"proc/stat":                        "cpu  1 0 1 8 0 0 0 0\ncpu0 1 0 1 8 0 0 0 0\n",
	}
	out := []Proc{{Pid: 1, Comm: "systemd", Cmdline: "/lib/systemd/systemd\x00--system"}}
	for pid := 2; pid <= 100; pid++ {
		out = append(out, Proc{Pid: pid, PPid: 1, Comm: "sshd", Cmdline: "/usr/sbin/sshd\x00-D", RSSKB: 8 << 10, Cgroup: "/system.slice/sshd.service"})
	}
	perCtr := (procs - len(out)) / ctrs
	pid := 100
	for c := 0; c < ctrs && perCtr >= 3; c++ {
		cg := fmt.Sprintf("/kubepods.slice/kubepods-pod%08x_0000_0000_0000_%012x.slice/cri-containerd-%064x.scope", c, c, c)
		files["sys/fs/cgroup"+cg+"/memory.oom.group"] = "1\n"
		pid++
		shim := pid
		out = append(out, Proc{Pid: shim, PPid: 1, Comm: "containerd-shim", Cmdline: "/usr/bin/containerd-shim-runc-v2\x00-id\x00x", Adj: -998, RSSKB: 10 << 10, Cgroup: "/system.slice/containerd.service"})
		pid++
		init := pid
		out = append(out, Proc{Pid: init, PPid: shim, Comm: "systemd", Cmdline: "/lib/systemd/systemd", Adj: -997, RSSKB: 20 << 10, Cgroup: cg})
		for w := 2; w < perCtr; w++ {
			pid++
			out = append(out, Proc{Pid: pid, PPid: init, Comm: "python3", Cmdline: "/usr/bin/python3\x00train.py", Adj: -997, RSSKB: 500 << 10, Cgroup: cg})
		}
	}
	return out, files
}
