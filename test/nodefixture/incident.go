package nodefixture

import "maps"

// The incident's node, in miniature: daemons at 0, a VM-like pod at -997.
const (
	PodCgroup  = "/kubepods.slice/kubepods-pod8f1d2c3e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/cri-containerd-3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e.scope"
	ShimCgroup = "/system.slice/containerd.service"
)

// IncidentProcs are the incident node's processes.
func IncidentProcs() []Proc {
	return []Proc{
		{Pid: 1, Comm: "systemd", Cmdline: "/lib/systemd/systemd", Adj: 0},
		{Pid: 2, Comm: "kthreadd", Kernel: true},
		{Pid: 400, PPid: 1, Comm: "sshd", Cmdline: "sshd: /usr/sbin/sshd -D", Score: 2},
		{Pid: 410, PPid: 1, Comm: "systemd-network", Cmdline: "/lib/systemd/systemd-networkd", Score: 1},
		{Pid: 420, PPid: 1, Comm: "kubelet", Cmdline: "/usr/bin/kubelet", Score: 0, Adj: -999},
		{Pid: 430, PPid: 1, Comm: "containerd", Cmdline: "/usr/bin/containerd", Score: 0, Adj: -999, Cgroup: ShimCgroup},
		{Pid: 500, PPid: 1, Comm: "containerd-shim", Cmdline: "/usr/bin/containerd-shim-runc-v2", Adj: -998, Cgroup: ShimCgroup},
		{Pid: 510, PPid: 500, Comm: "systemd", Cmdline: "/sbin/init", Score: 0, Adj: -997, Cgroup: PodCgroup},
		{Pid: 520, PPid: 510, Comm: "python3", Cmdline: "python3\x00train.py", Score: 0, Adj: -997, Cgroup: PodCgroup + "/user.slice"},
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
	}
	maps.Copy(files, changes)
	return files
}
