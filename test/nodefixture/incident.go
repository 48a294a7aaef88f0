package nodefixture

import "maps"

// The incident's node, in miniature: daemons at 0, a VM-like pod at -997
// whose 178 GiB limit is more than the 192 GiB node has left, and a
// BestEffort pod at 1000.
const (
	PodCgroup        = "/kubepods.slice/kubepods-pod8f1d2c3e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/cri-containerd-3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e.scope"
	BestEffortCgroup = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_0000_4000_8000_000000000001.slice/cri-containerd-5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f.scope"
	ShimCgroup       = "/system.slice/containerd.service"
)

// IncidentProcs are the incident node's processes.
func IncidentProcs() []Proc {
	return []Proc{
		{Pid: 1, Comm: "systemd", Cmdline: "/lib/systemd/systemd", RSSKB: 12 << 10},
		{Pid: 2, Comm: "kthreadd", Kernel: true},
		{Pid: 400, PPid: 1, Comm: "sshd", Cmdline: "sshd: /usr/sbin/sshd -D", RSSKB: 9 << 10},
		{Pid: 410, PPid: 1, Comm: "systemd-network", Cmdline: "/lib/systemd/systemd-networkd", RSSKB: 7 << 10},
		{Pid: 415, PPid: 1, Comm: "rpcbind", Cmdline: "/sbin/rpcbind\x00-f\x00-w", RSSKB: 3 << 10},
		{Pid: 420, PPid: 1, Comm: "kubelet", Cmdline: "/usr/bin/kubelet", Adj: -999, RSSKB: 120 << 10},
		{Pid: 430, PPid: 1, Comm: "containerd", Cmdline: "/usr/bin/containerd", Adj: -999, RSSKB: 80 << 10, Cgroup: ShimCgroup},
		{Pid: 500, PPid: 1, Comm: "containerd-shim", Cmdline: "/usr/bin/containerd-shim-runc-v2", Adj: -998, RSSKB: 10 << 10, Cgroup: ShimCgroup},
		{Pid: 510, PPid: 500, Comm: "systemd", Cmdline: "/sbin/init", Adj: -997, RSSKB: 20 << 10, Cgroup: PodCgroup},
		{Pid: 520, PPid: 510, Comm: "python3", Cmdline: "python3\x00train.py", Adj: -997, RSSKB: 2 << 20, Cgroup: PodCgroup + "/user.slice"},
		{Pid: 600, PPid: 500, Comm: "sleep", Cmdline: "sleep\x00infinity", Adj: 1000, RSSKB: 1 << 10, Cgroup: BestEffortCgroup},
	}
}

// IncidentFiles are the incident node's other files — cgroup v2, the task
// dump on, a 115200-baud serial console — with changes applied over them.
func IncidentFiles(changes map[string]string) map[string]string {
	files := map[string]string{
		"sys/fs/cgroup/cgroup.controllers":                 "cpu memory pids",
		"sys/fs/cgroup/cgroup.stat":                        "nr_descendants 40\nnr_dying_descendants 12\n",
		"proc/sys/vm/oom_dump_tasks":                       "1\n",
		"proc/sys/kernel/printk":                           "7\t4\t1\t7\n",
		"proc/sys/kernel/osrelease":                        "6.1.0-56-cloud-amd64\n",
		"proc/consoles":                                    "ttyS0 -W- (EC p a) 4:64\ntty0 -WU (E p ) 4:1\n",
		"proc/cmdline":                                     "BOOT_IMAGE=/vmlinuz root=UUID=x ro console=tty0 console=ttyS0,115200n8\n",
		"proc/interrupts":                                  "           CPU0       CPU1       CPU2       CPU3\n  0:         40          0          0          0   IO-APIC   2-edge      timer\n",
		"proc/stat":                                        "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 25 0 25 200 0 0 0 0 0 0\n",
		"sys/fs/cgroup" + PodCgroup + "/memory.oom.group":  "1\n",
		"sys/fs/cgroup" + PodCgroup + "/user.slice/.keep":  "",
		"sys/fs/cgroup/kubepods.slice/memory.oom.group":    "0\n",
		"sys/fs/cgroup" + ShimCgroup + "/memory.oom.group": "0\n",
		"sys/fs/cgroup/system.slice/memory.oom.group":      "0\n",
		"sys/fs/cgroup/kubepods.slice/kubepods-pod8f1d2c3e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/memory.oom.group": "0\n",
		"sys/fs/cgroup" + PodCgroup + "/memory.max":                                                            "191126044672\n", // 178 GiB
		"sys/fs/cgroup" + PodCgroup + "/memory.current":                                                        "2168455168\n",
		"proc/meminfo": Meminfo,
	}
	maps.Copy(files, changes)
	return files
}
