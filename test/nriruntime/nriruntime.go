// Package nriruntime is NRI's real runtime side (pkg/adaptation) on a socket
// of its own, the requests kubelet makes through it, and the code containerd
// and CRI-O use to apply an adjustment to an OCI spec: what oomguard's tests,
// VM scenarios and benchmarks put its NRI plugin through.
package nriruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	xgen "github.com/containerd/nri/pkg/runtime-tools/generate"
	"github.com/opencontainers/runtime-spec/specs-go"
	rgen "github.com/opencontainers/runtime-tools/generate"
	"golang.org/x/sys/unix"
)

// Runtime is the runtime side of NRI, holding the pods and containers it
// reports at Synchronize.
type Runtime struct {
	Dir       string
	Socket    string
	PluginLog io.Writer // where started plugins' output goes; os.Stderr when nil
	r         *nri.Adaptation

	mu      sync.Mutex
	pods    []*api.PodSandbox
	ctrs    []*api.Container
	synced  [][]*api.ContainerUpdate
	syncC   chan struct{}
	started bool
}

// SetLog sends what NRI's runtime side logs (for every Runtime of the
// process) to w.
func SetLog(w io.Writer) { nrilog.Set(writerLog{w}) }

type writerLog struct{ w io.Writer }

func (l writerLog) Debugf(context.Context, string, ...any) {}
func (l writerLog) Infof(_ context.Context, f string, a ...any) {
	fmt.Fprintf(l.w, "nri: "+f+"\n", a...)
}
func (l writerLog) Warnf(_ context.Context, f string, a ...any) {
	fmt.Fprintf(l.w, "nri: warning: "+f+"\n", a...)
}
func (l writerLog) Errorf(_ context.Context, f string, a ...any) {
	fmt.Fprintf(l.w, "nri: error: "+f+"\n", a...)
}

// Start runs the runtime side on dir/nri.sock. dir must be short: unix
// socket paths are limited to 108 bytes.
func Start(dir string, pods []*api.PodSandbox, ctrs []*api.Container) (*Runtime, error) {
	rt := &Runtime{Dir: dir, Socket: filepath.Join(dir, "nri.sock"), pods: pods, ctrs: ctrs, syncC: make(chan struct{}, 16)}
	return rt, rt.Restart()
}

// Restart starts the runtime side again after Stop, as a restarted runtime does.
func (rt *Runtime) Restart() error {
	syncFn := func(ctx context.Context, cb nri.SyncCB) error {
		rt.mu.Lock()
		pods, ctrs := rt.pods, rt.ctrs
		rt.mu.Unlock()
		upd, err := cb(ctx, pods, ctrs)
		rt.mu.Lock()
		rt.synced = append(rt.synced, upd)
		started := rt.started
		rt.mu.Unlock()
		if started { // not the sync of pre-installed plugins inside Start
			select {
			case rt.syncC <- struct{}{}:
			default:
			}
		}
		return err
	}
	updateFn := func(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, nil }
	r, err := nri.New("containerd", "2.1.4", syncFn, updateFn,
		nri.WithPluginPath(filepath.Join(rt.Dir, "plugins")),
		nri.WithPluginConfigPath(filepath.Join(rt.Dir, "conf.d")),
		nri.WithSocketPath(rt.Socket))
	if err != nil {
		return err
	}
	if err := r.Start(); err != nil {
		return err
	}
	rt.mu.Lock()
	rt.r, rt.started = r, true
	rt.mu.Unlock()
	return nil
}

// Stop stops the runtime side.
func (rt *Runtime) Stop() {
	rt.mu.Lock()
	rt.started = false
	rt.mu.Unlock()
	if rt.r != nil {
		rt.r.Stop()
		rt.r = nil
	}
}

// Add is a pod's container the runtime reports at the next Synchronize: one
// created while no plugin was connected.
func (rt *Runtime) Add(pod *api.PodSandbox, ctr *api.Container) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.pods, rt.ctrs = append(rt.pods, pod), append(rt.ctrs, ctr)
}

// LastSync returns the updates the plugins asked for at the last Synchronize.
func (rt *Runtime) LastSync() []*api.ContainerUpdate {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.synced) == 0 {
		return nil
	}
	return rt.synced[len(rt.synced)-1]
}

// WaitSync waits for the next plugin to be synchronized.
func (rt *Runtime) WaitSync(timeout time.Duration) error {
	select {
	case <-rt.syncC:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("no plugin synchronized within %s", timeout)
	}
}

// StartPlugin runs a plugin binary that connects to the socket, and waits
// until the runtime side has synchronized it.
func (rt *Runtime) StartPlugin(bin string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, append(args, "--socket", rt.Socket)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if rt.PluginLog != nil {
		cmd.Stdout, cmd.Stderr = rt.PluginLog, rt.PluginLog
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := rt.WaitSync(20 * time.Second); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("plugin %s: %w", bin, err)
	}
	return cmd, nil
}

// Create relays a CreateContainer request to the plugins.
func (rt *Runtime) Create(pod *api.PodSandbox, ctr *api.Container) (*api.CreateContainerResponse, error) {
	b := rt.r.BlockPluginSync()
	defer b.Unblock()
	return rt.r.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: ctr})
}

// Update relays an UpdateContainer request (a resize) to the plugins.
func (rt *Runtime) Update(pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.UpdateContainerResponse, error) {
	b := rt.r.BlockPluginSync()
	defer b.Unblock()
	return rt.r.UpdateContainer(context.Background(), &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
}

// KubeletPod is a pod as kubelet sends it, with the cgroup parent of its QoS
// class (guaranteed, burstable, besteffort) under the systemd driver.
func KubeletPod(uid, namespace, qos, handler string, annotations map[string]string) *api.PodSandbox {
	parent := map[string]string{
		"guaranteed": "kubepods-pod" + uid + ".slice",
		"burstable":  "kubepods-burstable-pod" + uid + ".slice",
		"besteffort": "kubepods-besteffort-pod" + uid + ".slice",
	}[qos]
	return &api.PodSandbox{Id: "pod-" + uid, Name: "pod-" + uid, Uid: uid, Namespace: namespace, RuntimeHandler: handler,
		Annotations: annotations, Labels: map[string]string{"app": "x"}, Linux: &api.LinuxPodSandbox{CgroupParent: parent}}
}

// KubeletContainer is a container as kubelet asks for it on cgroup v2:
// its QoS score and memory.oom.group = 1.
func KubeletContainer(pod *api.PodSandbox, name string, score int, args ...string) *api.Container {
	return &api.Container{
		Id: pod.Id + "-" + name, PodSandboxId: pod.Id, Name: name, Args: args,
		State: api.ContainerState_CONTAINER_RUNNING,
		Linux: &api.LinuxContainer{
			OomScoreAdj: &api.OptionalInt{Value: int64(score)},
			CgroupsPath: pod.Linux.CgroupParent + ":cri-containerd:" + pod.Id + "-" + name,
			Resources:   &api.LinuxResources{Unified: map[string]string{"memory.oom.group": "1"}},
		},
	}
}

// ApplyAdjustment changes spec as containerd and CRI-O do with a plugin's
// adjustment: runtime-tools' generator wrapped by NRI's.
func ApplyAdjustment(spec *specs.Spec, adj *api.ContainerAdjustment) error {
	g := rgen.NewFromSpec(spec)
	if err := xgen.SpecGenerator(&g).Adjust(adj); err != nil {
		return fmt.Errorf("apply the NRI adjustment to the spec: %w", err)
	}
	return nil
}

// StartContainer relays StartContainer: the container is created, its
// process waiting, and the runtime starts it when the plugins have answered.
func (rt *Runtime) StartContainer(pod *api.PodSandbox, ctr *api.Container) error {
	b := rt.r.BlockPluginSync()
	defer b.Unblock()
	return rt.r.StartContainer(context.Background(), &api.StartContainerRequest{Pod: pod, Container: ctr})
}

// Remove relays RemoveContainer: the container is gone.
func (rt *Runtime) Remove(pod *api.PodSandbox, ctr *api.Container) error {
	b := rt.r.BlockPluginSync()
	defer b.Unblock()
	return rt.r.RemoveContainer(context.Background(), &api.RemoveContainerRequest{Pod: pod, Container: ctr})
}

// PostUpdate relays PostUpdateContainer: the runtime applied a resize.
func (rt *Runtime) PostUpdate(pod *api.PodSandbox, ctr *api.Container) error {
	b := rt.r.BlockPluginSync()
	defer b.Unblock()
	return rt.r.PostUpdateContainer(context.Background(), &api.PostUpdateContainerRequest{Pod: pod, Container: ctr})
}

// BundleContainer is the pod and container NRI tells plugins about for a
// runc bundle: its command, score, unified resources and cgroup.
func BundleContainer(id, namespace string, spec *specs.Spec) (*api.PodSandbox, *api.Container) {
	pod := &api.PodSandbox{Id: "pod-" + id, Name: id, Uid: id, Namespace: namespace, RuntimeHandler: "runc",
		Linux: &api.LinuxPodSandbox{CgroupParent: filepath.Dir(spec.Linux.CgroupsPath)}}
	ctr := &api.Container{Id: id, PodSandboxId: pod.Id, Name: "main", Args: spec.Process.Args,
		State: api.ContainerState_CONTAINER_CREATED,
		Linux: &api.LinuxContainer{CgroupsPath: spec.Linux.CgroupsPath, Resources: &api.LinuxResources{}}}
	if s := spec.Process.OOMScoreAdj; s != nil {
		ctr.Linux.OomScoreAdj = &api.OptionalInt{Value: int64(*s)}
	}
	if r := spec.Linux.Resources; r != nil && r.Unified != nil {
		ctr.Linux.Resources.Unified = r.Unified
	}
	return pod, ctr
}

// RunBundle runs the runc bundle at dir as containerd does with NRI:
// CreateContainer (the adjustment applied to config.json), `runc create`,
// StartContainer while the container's process waits, `runc start`; it
// waits for the container's process and returns its exit status. The
// container's output goes to stdout and stderr. The calling process becomes
// a child subreaper, to wait for the container's process.
func (rt *Runtime) RunBundle(ctx context.Context, runcRoot, dir, id, namespace string, stdout, stderr io.Writer, runcArgs ...string) (int, error) {
	spec, err := readSpec(dir)
	if err != nil {
		return -1, err
	}
	pod, ctr := BundleContainer(id, namespace, spec)
	rsp, err := rt.Create(pod, ctr)
	if err != nil {
		return -1, fmt.Errorf("CreateContainer through NRI: %w", err)
	}
	if err := ApplyAdjustment(spec, rsp.GetAdjust()); err != nil {
		return -1, err
	}
	if err := writeSpec(dir, spec); err != nil {
		return -1, err
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("become a subreaper: %w", err)
	}
	runc := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "runc", append([]string{"--root", runcRoot}, args...)...)
	}
	// The container's init keeps runc create's stdio until it exits: files,
	// so that create returns; what they carry is copied until then.
	outW, outDone, err := fileFor(stdout)
	if err != nil {
		return -1, err
	}
	errW, errDone, err := fileFor(stderr)
	if err != nil {
		return -1, err
	}
	defer func() { outDone(); errDone() }()
	create := runc(append(append([]string{"create"}, runcArgs...), "--bundle", dir, id)...)
	create.Stdout, create.Stderr = outW, errW
	err = create.Run()
	outW.Close()
	errW.Close()
	if err != nil {
		return -1, fmt.Errorf("runc create: %w", err)
	}
	defer runc("delete", "--force", id).Run()
	st, err := runc("state", id).Output()
	if err != nil {
		return -1, fmt.Errorf("runc state: %w", err)
	}
	var state struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(st, &state); err != nil || state.Pid <= 0 {
		return -1, fmt.Errorf("runc state %s: %v", st, err)
	}
	ctr.Pid = uint32(state.Pid)
	if err := rt.StartContainer(pod, ctr); err != nil {
		return -1, fmt.Errorf("StartContainer through NRI: %w", err)
	}
	if out, err := runc("start", id).CombinedOutput(); err != nil {
		return -1, fmt.Errorf("runc start: %w: %s", err, out)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(state.Pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("wait for the container: %w", err)
		}
		break
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// fileFor is w as a file a child can hold: w itself, or a pipe copied to w
// (done waits for the copy to end, when every holder closed it). The file
// returned is the caller's to close.
func fileFor(w io.Writer) (f *os.File, done func(), err error) {
	if f, ok := w.(*os.File); ok {
		dup, err := unix.Dup(int(f.Fd()))
		if err != nil {
			return nil, nil, err
		}
		return os.NewFile(uintptr(dup), f.Name()), func() {}, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	copied := make(chan struct{})
	go func() { io.Copy(w, r); r.Close(); close(copied) }()
	return pw, func() { <-copied }, nil
}

func readSpec(dir string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s/config.json: %w", dir, err)
	}
	return &s, nil
}

func writeSpec(dir string, s *specs.Spec) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}
