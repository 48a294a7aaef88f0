// Command kubeletish does, through a runtime's CRI, what a standalone kubelet
// cannot be made to do at a given step, for oomguard's tests: import images
// from OCI archives into containerd, run a host-network pod with kubelet's
// Linux resources (the QoS score, memory.oom.group = 1), resize it as
// kubelet does, exec into it; and it finds, inspects and waits for the pods a
// real kubelet runs. Every report is an "@@RESULT k=v …" line.
//
//	kubeletish import FILE...
//	kubeletish run NAME [--qos guaranteed|burstable|besteffort] [--handler H] [--] ARGS...
//	kubeletish resize NAME
//	kubeletish inspect NAME [LABEL]
//	kubeletish wait-ready
//	kubeletish remove NAME
//	kubeletish pod NAME [--until running|exited] [--timeout D]   a pod kubelet runs
//	kubeletish exec NAME -- CMD...
//	kubeletish churn PREFIX --count N --parallel P --want SCORE [--qos Q] [--] ARGS...
//	kubeletish remove-all
//
// CONTAINERD_ADDRESS names containerd's socket; KUBELETISH_STATE where pods
// are recorded (/run).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const workload = "registry.example/oomguard/workload:1"

// socket is containerd's, from $CONTAINERD_ADDRESS as ctr reads it.
var socket = func() string {
	if a := os.Getenv("CONTAINERD_ADDRESS"); a != "" {
		return a
	}
	return "/run/containerd/containerd.sock"
}()

// state is where run records each pod's container ID, from $KUBELETISH_STATE.
var state = func() string {
	if d := os.Getenv("KUBELETISH_STATE"); d != "" {
		return d
	}
	return "/run"
}()

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletish:", err)
		fmt.Printf("@@RESULT kubeletish_error=%q\n", err.Error())
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kubeletish import|run|resize|inspect …")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	switch args[0] {
	case "import":
		return importImages(ctx, args[1:])
	case "run":
		return runPod(ctx, args[1:])
	case "resize":
		return resize(ctx, args[1:])
	case "inspect":
		return inspect(ctx, args[1:])
	case "wait-ready":
		return waitReady(ctx)
	case "remove":
		return remove(ctx, args[1:])
	case "pod":
		return waitPod(ctx, args[1:])
	case "exec":
		return execIn(ctx, args[1:])
	case "churn":
		return churn(ctx, args[1:])
	case "remove-all":
		return removeAll(ctx)
	case "now":
		fmt.Println(time.Now().UnixNano()) // busybox's date has no %N
		return nil
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// importImages loads OCI archives into the k8s.io namespace and unpacks them
// for the native snapshotter, as `ctr -n k8s.io images import` does.
func importImages(ctx context.Context, files []string) error {
	c, err := containerd.New(socket, containerd.WithDefaultNamespace("k8s.io"))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx = namespaces.WithNamespace(ctx, "k8s.io")
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return err
		}
		imgs, err := c.Import(ctx, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("import %s: %w", f, err)
		}
		for _, im := range imgs {
			img := containerd.NewImage(c, im)
			if err := img.Unpack(ctx, "native"); err != nil {
				return fmt.Errorf("unpack %s: %w", im.Name, err)
			}
			fmt.Printf("@@RESULT imported=%s\n", im.Name)
		}
	}
	return nil
}

func criClient() (cri.RuntimeServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return cri.NewRuntimeServiceClient(conn), func() { conn.Close() }, nil
}

// podClient is a CRI client and the container ID `run NAME` recorded.
func podClient(name string) (cri.RuntimeServiceClient, string, func(), error) {
	id, err := os.ReadFile(filepath.Join(state, "pod-"+name))
	if err != nil {
		return nil, "", nil, err
	}
	rs, done, err := criClient()
	return rs, string(id), done, err
}

// kubelet's scores and cgroup parents per QoS class (cgroupfs driver).
var qosScore = map[string]int64{"guaranteed": -997, "burstable": 500, "besteffort": 1000}

func runPod(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("run NAME …")
	}
	name := args[0]
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	qos := fs.String("qos", "guaranteed", "QoS class")
	handler := fs.String("handler", "", "runtime handler (RuntimeClass)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if _, ok := qosScore[*qos]; !ok {
		return fmt.Errorf("qos %q", *qos)
	}
	rs, done, err := criClient()
	if err != nil {
		return err
	}
	defer done()
	start := time.Now()
	sb, id, err := startPod(ctx, rs, name, *qos, *handler, fs.Args())
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(state, "pod-"+name), []byte(id), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(state, "sandbox-"+name), []byte(sb), 0o644); err != nil {
		return err
	}
	fmt.Printf("@@RESULT pod=%s created_ms=%d\n", name, time.Since(start).Milliseconds())
	return nil
}

// startPod runs a pod of one container as kubelet does, and returns the
// sandbox's and the container's IDs.
func startPod(ctx context.Context, rs cri.RuntimeServiceClient, name, qos, handler string, args []string) (string, string, error) {
	score := qosScore[qos]
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", len(name), time.Now().UnixNano()&0xffffffffffff)
	parent := "/kubepods/pod" + uid
	if qos != "guaranteed" {
		parent = "/kubepods/" + qos + "/pod" + uid
	}
	// As kubelet asks for a host-network pod: no shared pid namespace, so
	// CRI-O (drop_infra_ctr) runs no infra container.
	namespaces := &cri.NamespaceOption{Network: cri.NamespaceMode_NODE, Pid: cri.NamespaceMode_CONTAINER}
	sandbox := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "default"},
		LogDirectory: "/var/log/pods/" + uid,
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent:    parent,
			SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: namespaces},
		},
	}
	sb, err := rs.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sandbox, RuntimeHandler: handler})
	if err != nil {
		return "", "", fmt.Errorf("RunPodSandbox: %w", err)
	}
	res := &cri.LinuxContainerResources{OomScoreAdj: score, Unified: groupKill()}
	ctr, err := rs.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: name},
			Image:    &cri.ImageSpec{Image: workload, UserSpecifiedImage: workload}, // CRI-O verifies signatures against what the user named
			Labels:   map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default", "io.kubernetes.container.name": name},
			Args:     args,
			LogPath:  name + ".log",
			Linux: &cri.LinuxContainerConfig{Resources: res,
				SecurityContext: &cri.LinuxContainerSecurityContext{NamespaceOptions: namespaces}},
		},
		SandboxConfig: sandbox,
	})
	if err != nil {
		return "", "", fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := rs.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		return "", "", fmt.Errorf("StartContainer: %w", err)
	}
	return sb.PodSandboxId, ctr.ContainerId, nil
}

// churn creates count pods, parallel at a time, as a busy node does, and
// watches each container's init until its score is want: for each, how
// long after it was running that was (0: before; -1: never, within --wait
// after the last one's creation).
func churn(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("churn PREFIX …")
	}
	prefix := args[0]
	fs := flag.NewFlagSet("churn", flag.ContinueOnError)
	count := fs.Int("count", 20, "pods to create")
	parallel := fs.Int("parallel", 4, "creations at once")
	qos := fs.String("qos", "burstable", "QoS class")
	want := fs.Int("want", 0, "the score each container's init must reach")
	wait := fs.Duration("wait", 20*time.Second, "how long after the last creation to wait for it")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if _, ok := qosScore[*qos]; !ok {
		return fmt.Errorf("qos %q", *qos)
	}
	rs, done, err := criClient()
	if err != nil {
		return err
	}
	defer done()
	type made struct {
		name, id string
		pid      int
		at       time.Time
		fixed    time.Duration
	}
	out := make([]made, *count)
	names := make(chan int)
	errs := make(chan error, *parallel)
	for range *parallel {
		go func() {
			var err error
			for i := range names {
				name := fmt.Sprintf("%s-%d", prefix, i)
				var id string
				if _, id, err = startPod(ctx, rs, name, *qos, "", fs.Args()); err != nil {
					break
				}
				at := time.Now() // running: the plugin sets it before it runs, or later
				pid, perr := initPid(ctx, rs, id)
				if perr != nil {
					err = perr
					break
				}
				out[i] = made{name: name, id: id, pid: pid, at: at, fixed: -1}
				if scoreOf(pid) == strconv.Itoa(*want) {
					out[i].fixed = 0
				}
			}
			for range names { // drain: another worker may still send
			}
			errs <- err
		}()
	}
	for i := range *count {
		names <- i
	}
	close(names)
	for range *parallel {
		if e := <-errs; e != nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	left := 0
	for _, m := range out {
		if m.fixed < 0 {
			left++
		}
	}
	for deadline := time.Now().Add(*wait); left > 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for i := range out {
			if out[i].fixed < 0 && scoreOf(out[i].pid) == strconv.Itoa(*want) {
				out[i].fixed = time.Since(out[i].at)
				left--
			}
		}
	}
	for _, m := range out {
		ms := int64(-1)
		if m.fixed >= 0 {
			ms = m.fixed.Milliseconds()
		}
		fmt.Printf("@@RESULT churn=%s id=%s pid=%d running_ns=%d fixed_ms=%d score=%s\n", m.name, m.id, m.pid, m.at.UnixNano(), ms, scoreOf(m.pid))
	}
	return nil
}

func scoreOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	return strings.TrimSpace(string(b))
}

// initPid is the container's init, from the runtime's verbose status.
func initPid(ctx context.Context, rs cri.RuntimeServiceClient, id string) (int, error) {
	st, err := rs.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("ContainerStatus %s: %w", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("ContainerStatus %s: no pid in its verbose info (%v)", id, err)
	}
	return info.Pid, nil
}

// removeAll stops and removes every pod, as kubelet does when they are deleted.
func removeAll(ctx context.Context) error {
	rs, done, err := criClient()
	if err != nil {
		return err
	}
	defer done()
	// Killed at once: an init that ignores SIGTERM (PID 1 of its namespace)
	// would hold CRI-O's StopPodSandbox for the whole grace period.
	ctrs, err := rs.ListContainers(ctx, &cri.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("ListContainers: %w", err)
	}
	for _, c := range ctrs.Containers {
		if _, err := rs.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: c.Id, Timeout: 0}); err != nil {
			return fmt.Errorf("StopContainer: %w", err)
		}
	}
	list, err := rs.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("ListPodSandbox: %w", err)
	}
	for _, sb := range list.Items {
		if _, err := rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			return fmt.Errorf("StopPodSandbox: %w", err)
		}
		if _, err := rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			return fmt.Errorf("RemovePodSandbox: %w", err)
		}
	}
	fmt.Printf("@@RESULT removed_all=%d\n", len(list.Items))
	return nil
}

// waitReady polls the CRI until it answers, as kubelet does at start.
func waitReady(ctx context.Context) error {
	rs, done, err := criClient()
	if err != nil {
		return err
	}
	defer done()
	for {
		_, err := rs.Status(ctx, &cri.StatusRequest{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the CRI never became ready: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// resize is kubelet's UpdateContainerResources on a resize: the new limits
// and memory.oom.group = 1 again.
func resize(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errors.New("resize NAME")
	}
	rs, id, done, err := podClient(args[0])
	if err != nil {
		return err
	}
	defer done()
	_, err = rs.UpdateContainerResources(ctx, &cri.UpdateContainerResourcesRequest{ContainerId: id,
		// As kubelet encodes a resize of a Guaranteed pod to cpu 100m, memory 96Mi.
		Linux: &cri.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 10000, CpuShares: 102,
			MemoryLimitInBytes: 96 << 20, OomScoreAdj: -997, Unified: groupKill()}})
	if err != nil {
		return fmt.Errorf("UpdateContainerResources: %w", err)
	}
	fmt.Printf("@@RESULT resized=%s\n", args[0])
	return nil
}

// inspect reports the container's state, pid, score and group flag.
func inspect(ctx context.Context, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return errors.New("inspect NAME [LABEL]")
	}
	label := args[0]
	if len(args) == 2 {
		label = args[1]
	}
	rs, id, done, err := podClient(args[0])
	if err != nil {
		return err
	}
	defer done()
	st, err := rs.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return err
	}
	pid := ""
	if info := st.Info["info"]; info != "" {
		if i := strings.Index(info, `"pid":`); i >= 0 {
			pid = strings.TrimSpace(strings.SplitN(info[i+6:], ",", 2)[0])
		}
	}
	score, _ := os.ReadFile("/proc/" + pid + "/oom_score_adj")
	cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
	path := ""
	for _, line := range strings.Split(string(cg), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	group, _ := os.ReadFile("/sys/fs/cgroup" + path + "/memory.oom.group")
	max, _ := os.ReadFile("/sys/fs/cgroup" + path + "/memory.max")
	fmt.Printf("@@RESULT inspect=%s state=%s pid=%s oom_score_adj=%s oom_group=%s memory_max=%s\n", label, st.Status.State,
		pid, strings.TrimSpace(string(score)), strings.TrimSpace(string(group)), strings.TrimSpace(string(max)))
	return nil
}

// remove stops and removes a pod run made, as kubelet does when it is deleted.
func remove(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errors.New("remove NAME")
	}
	id, err := os.ReadFile(filepath.Join(state, "sandbox-"+args[0]))
	if err != nil {
		return err
	}
	rs, done, err := criClient()
	if err != nil {
		return err
	}
	defer done()
	if _, err := rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: string(id)}); err != nil {
		return fmt.Errorf("StopPodSandbox: %w", err)
	}
	if _, err := rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: string(id)}); err != nil {
		return fmt.Errorf("RemovePodSandbox: %w", err)
	}
	fmt.Printf("@@RESULT removed=%s\n", args[0])
	return nil
}

// groupKill is memory.oom.group = 1, as kubelet asks for it on cgroup v2
// nodes only (pkg/kubelet/kuberuntime/kuberuntime_container_linux.go).
func groupKill() map[string]string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		return nil
	}
	return map[string]string{"memory.oom.group": "1"}
}

// waitPod waits until the container of the pod kubelet runs as NAME (a
// static pod: NAME-node) is in the state asked for, records it for inspect
// and exec, and reports when it started and how it ended.
func waitPod(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("pod NAME …")
	}
	name := args[0]
	fs := flag.NewFlagSet("pod", flag.ContinueOnError)
	until := fs.String("until", "running", "running, exited, or gone (none running)")
	timeout := fs.Duration("timeout", 150*time.Second, "how long to wait")
	container := fs.String("container", "", "only the container of this name (not an init container before it)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rs, done, err := criClient()
	if err != nil {
		return err
	}
	defer done()
	want := map[string]cri.ContainerState{"running": cri.ContainerState_CONTAINER_RUNNING, "exited": cri.ContainerState_CONTAINER_EXITED}[*until]
	for {
		labels := map[string]string{"io.kubernetes.pod.name": name + "-node"}
		if *container != "" {
			labels["io.kubernetes.container.name"] = *container
		}
		list, err := rs.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{LabelSelector: labels}})
		if err == nil && *until == "gone" && !slices.ContainsFunc(list.Containers, func(c *cri.Container) bool {
			return c.State == cri.ContainerState_CONTAINER_RUNNING
		}) {
			fmt.Printf("@@RESULT pod=%s state=gone\n", name)
			return nil
		}
		if err == nil {
			for _, c := range list.Containers {
				st, err := rs.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: c.Id})
				if err != nil || st.Status.State != want {
					continue
				}
				if err := os.WriteFile(filepath.Join(state, "pod-"+name), []byte(c.Id), 0o644); err != nil {
					return err
				}
				fmt.Printf("@@RESULT pod=%s state=%s started_ns=%d exit=%d reason=%s\n", name, st.Status.State,
					st.Status.StartedAt, st.Status.ExitCode, st.Status.Reason)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			fmt.Printf("@@RESULT pod=%s state=timeout\n", name)
			return fmt.Errorf("pod %s: no container %s within %s", name, *until, *timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// execIn runs a command in the pod's container, as kubectl exec does.
func execIn(ctx context.Context, args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return errors.New("exec NAME -- CMD...")
	}
	rs, id, done, err := podClient(args[0])
	if err != nil {
		return err
	}
	defer done()
	r, err := rs.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: id, Cmd: args[2:], Timeout: 60})
	if err != nil {
		return fmt.Errorf("ExecSync: %w", err)
	}
	os.Stdout.Write(r.Stdout)
	os.Stderr.Write(r.Stderr)
	fmt.Printf("@@RESULT exec=%s exit=%d\n", args[0], r.ExitCode)
	return nil
}
