package vm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/syncbuf"
)

// The cluster boots: a real control plane (test/controlplane) runs on the
// build host, one per boot, bound to its loopback; the VM's kubelet
// registers with it as a Node through QEMU's user network, where the host's
// loopback is 10.0.2.2. The control plane runs on the host, not in the VM:
// the VM has one emulated core (no KVM), which etcd and the API server would
// share with the node under test, and the node is what the scenarios measure.
// The test drives the cluster as an operator does (kubectl, helm, from the
// host) and the node through the agent (test/vm/agent), which runs the
// shell the test sends, as an operator's ssh would.

// Where the node is on QEMU's user network, the agent's port on it, and
// the port a webhook on the node's network listens on (the chart's
// imagepatchWebhook.port with hostNetwork).
const (
	NodeIP      = "10.0.2.15"
	HostIP      = "10.0.2.2"
	agentPort   = 7070
	WebhookPort = 9443
	NodeName    = "node"
	// ClusterMem holds, besides the node's processes, its root filesystem
	// in RAM, where the runtime copies an image for each container (no
	// overlay module: containerd's native snapshotter, CRI-O's vfs): a
	// rollout's two plugin pods are two copies of the release image.
	ClusterMem = 2560
)

// Cluster is a running cluster boot, for a variant's Drive.
type Cluster struct {
	*controlplane.Cluster
	Env     *Env
	Node    *Node
	dir     string
	notes   *[]string
	figures map[string]time.Duration
	steps   Stepper
}

// Steps runs a drive's steps in order, as the boot was told to (subtests in
// tests), noting how long each took; it stops at the first that fails.
func (c *Cluster) Steps(ctx context.Context, prefix string, steps []Step) error {
	timed := make([]Step, len(steps))
	for i, s := range steps {
		timed[i] = Step{Name: s.Name, Run: func(ctx context.Context) error {
			start := time.Now()
			err := s.Run(ctx)
			if err == nil {
				c.Note("%s: %s (%s)", prefix, s.Name, time.Since(start).Round(100*time.Millisecond))
			}
			return err
		}}
	}
	return c.steps(ctx, timed)
}

// Note records a figure or an observation for the test's log.
func (c *Cluster) Note(format string, args ...any) {
	*c.notes = append(*c.notes, fmt.Sprintf(format, args...))
}

// Helm runs the real helm (make components) against the cluster, from the
// repository, as docs/install-cluster.md says; the error carries its output.
func (c *Cluster) Helm(ctx context.Context, args ...string) ([]byte, error) {
	helm, err := c.Env.Component("helm", "helm")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Dir = c.Env.RepoDir
	h := filepath.Join(c.dir, "helm")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Admin, "HELM_CACHE_HOME="+h, "HELM_CONFIG_HOME="+h, "HELM_DATA_HOME="+h)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Kubectl runs kubectl as the cluster's admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return c.Cluster.Kubectl(ctx, nil, args...)
}

// Apply applies a manifest.
func (c *Cluster) Apply(ctx context.Context, manifest string) error {
	_, err := c.Cluster.Kubectl(ctx, []byte(manifest), "apply", "-f", "-")
	return err
}

// Node is the VM's node, through its agent.
type Node struct {
	url, token string
	client     *http.Client
}

// Run runs script on the node (its helpers sourced) and returns its output;
// a non-zero exit is an error carrying the output.
func (n *Node) Run(ctx context.Context, script string) (string, error) {
	return n.RunFor(ctx, 5*time.Minute, script)
}

// RunFor is Run with the script killed after timeout.
func (n *Node) RunFor(ctx context.Context, timeout time.Duration, script string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url+"/run?timeout="+strconv.Itoa(int(timeout.Seconds())), strings.NewReader(script))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	resp, err := n.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", fmt.Errorf("node: %s: %s", resp.Status, b)
	}
	var r struct {
		Output string `json:"output"`
		Code   int    `json:"code"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	if r.Code != 0 {
		return r.Output, fmt.Errorf("on the node, exit %d:\n%s\nscript:\n%s", r.Code, strings.TrimSpace(r.Output), script)
	}
	return r.Output, nil
}

func (n *Node) done() {
	req, _ := http.NewRequest(http.MethodPost, n.url+"/done", nil)
	req.Header.Set("Authorization", "Bearer "+n.token)
	if resp, err := n.client.Do(req); err == nil {
		resp.Body.Close()
	}
}

// clusterScript is what a cluster boot's VM runs: the node's network, its
// runtime and kubelet, then the agent until the test is done.
const clusterScript = `net_up
start_runtime
start_kubelet
agent --listen ` + NodeIP + `:` + "7070" + ` >>/tmp/agent.log 2>&1
report
`

// cluster prepares a cluster boot: the control plane started, and the
// node's kubelet configuration, the network's modules and the agent in g.
type clusterBoot struct {
	cp       *controlplane.Cluster
	hostPort int
	token    string
	// WebhookPort forwarded to the host's loopback at this port: the API
	// server reaches a Service's endpoint on the node's network through it.
	webhookFwd int
	steps      Stepper // how the drive's steps run
}

func (e *Env) startCluster(ctx context.Context, dir string, g *Guest) (*clusterBoot, error) {
	b := &clusterBoot{}
	var err error
	if b.hostPort, err = controlplane.FreePort(); err != nil {
		return nil, err
	}
	if b.webhookFwd, err = controlplane.FreePort(); err != nil {
		return nil, err
	}
	bin, err := e.Component("kubernetes", "")
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: bin, Dir: filepath.Join(dir, "cp"), Hosts: []string{HostIP}, Reach: b.reach})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	b.cp = cp
	fail := func(err error) (*clusterBoot, error) { cp.Stop(); return nil, err }
	tok := make([]byte, 16)
	rand.Read(tok)
	b.token = hex.EncodeToString(tok)
	kc, err := cp.NodeKubeconfig(fmt.Sprintf("https://%s:%d", HostIP, cp.Port), NodeName)
	if err != nil {
		return fail(err)
	}
	g.File("/etc/kubernetes/kubelet.conf", kc, 0o600)
	g.File("/etc/kubernetes/pki/ca.crt", cp.CA(), 0o644)
	g.File("/etc/oomguard-vm/agent-token", []byte(b.token+"\n"), 0o600)
	mods, order, err := KernelModules(g.kernel)
	if err != nil {
		return fail(err)
	}
	for _, name := range order {
		if err := g.CopyFile("/lib/modules/oomguard/"+name, filepath.Join(mods, name)); err != nil {
			return fail(err)
		}
	}
	g.File("/lib/modules/oomguard/order", []byte(strings.Join(order, "\n")+"\n"), 0o644)
	if err := g.CopyFile("/usr/local/bin/agent", g.Bin("agent")); err != nil {
		return fail(err)
	}
	// Node Ready needs a CNI network; every pod here is on the host's.
	g.File("/etc/cni/net.d/10-host.conflist", []byte(`{"cniVersion":"1.0.0","name":"host","plugins":[{"type":"noop"}]}`+"\n"), 0o644)
	g.File("/opt/cni/bin/noop", []byte(noopCNI), 0o755)
	return b, nil
}

// reach is the control plane's way to the node's network: only the
// webhook's port is forwarded.
func (b *clusterBoot) reach(ctx context.Context, addr string) (net.Conn, error) {
	if addr != net.JoinHostPort(NodeIP, strconv.Itoa(WebhookPort)) {
		return nil, fmt.Errorf("%s: only %s:%d of the node is forwarded", addr, NodeIP, WebhookPort)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", b.webhookFwd))
}

// noopCNI is a CNI plugin for nodes whose pods all use the host's network:
// it answers VERSION, and nothing else is asked of it.
const noopCNI = `#!/bin/sh
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}' ;;
ADD) echo '{"cniVersion":"1.0.0"}' ;;
esac
`

// clusterKubeletConfig is kubelet's configuration on a registered node:
// clients by the cluster's CA, no server of its own (the API server does not
// reach into the VM), the cgroupfs driver with QoS cgroups.
const clusterKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failSwapOn: false
enableServer: false
syncFrequency: 5s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: AlwaysAllow
localStorageCapacityIsolation: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
resolvConf: ""
`

// WithClusterKubelet is WithKubelet for a node that registers with the
// boot's API server.
func WithClusterKubelet(g *Guest, rt Runtime) error {
	if err := WithKubelet(g, rt); err != nil {
		return err
	}
	g.File("/etc/kubernetes/kubelet.yaml", []byte(fmt.Sprintf(clusterKubeletConfig, rt.Socket)), 0o644)
	return nil
}

// drive boots the VM with the network, waits for its agent, runs the
// variant's Drive, and ends the boot.
func (e *Env) drive(ctx context.Context, s Scenario, v Variant, cb *clusterBoot, dir string, args []string) (*Run, error) {
	args = append(args, "-netdev", fmt.Sprintf("user,id=n0,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:%d-%s:%d,hostfwd=tcp:127.0.0.1:%d-%s:%d",
		cb.hostPort, NodeIP, agentPort, cb.webhookFwd, NodeIP, WebhookPort),
		"-device", "virtio-net-pci,netdev=n0,romfile=")
	cmd := exec.CommandContext(ctx, QEMU, args...)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	node := &Node{url: fmt.Sprintf("http://127.0.0.1:%d", cb.hostPort), token: cb.token, client: &http.Client{}}
	var notes []string
	c := &Cluster{Cluster: cb.cp, Env: e, Node: node, dir: dir, notes: &notes, figures: map[string]time.Duration{}, steps: cb.steps}
	driveErr := func() error {
		for {
			if _, err := node.RunFor(ctx, 30*time.Second, "true"); err == nil {
				break
			}
			select {
			case err := <-exited:
				exited <- err
				return fmt.Errorf("the VM ended before its agent answered: %v", err)
			case <-ctx.Done():
				return fmt.Errorf("the agent did not answer: %w", ctx.Err())
			case <-time.After(time.Second):
			}
		}
		return v.Drive(ctx, c)
	}()
	if driveErr != nil {
		// What the node saw, before it goes.
		if o, err := node.RunFor(ctx, time.Minute, "report; tail -60 /tmp/kubelet.log | sed 's/^/@@KUBELET /'"); err == nil {
			fmt.Fprint(&out, o)
		}
	}
	node.done()
	var qemuErr error
	select {
	case qemuErr = <-exited:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		qemuErr = <-exited
	}
	run := ParseConsole(out.String())
	run.Scenario, run.Variant, run.Elapsed, run.Notes, run.Figures = s.Name, v.Name, time.Since(start), notes, c.figures
	switch {
	case driveErr != nil:
		return run, fmt.Errorf("%s/%s: %w\ncontrol plane:\n%s\nconsole:\n%s", s.Name, v.Name, driveErr, cb.cp.Logs(15), TailLines(run.Console, 200))
	case qemuErr != nil && ctx.Err() == nil:
		return run, fmt.Errorf("%s/%s: qemu: %v; console:\n%s", s.Name, v.Name, qemuErr, TailLines(run.Console, 200))
	case !strings.Contains(run.Console, "@@DONE"):
		return run, fmt.Errorf("%s/%s: the VM did not finish; console:\n%s", s.Name, v.Name, TailLines(run.Console, 200))
	}
	return run, nil
}

func TailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Containers on the node, as kubeletish inspects them.

var inspectRE = regexp.MustCompile(`@@RESULT inspect=\S+ (.*)`)

// Inspect is what the node shows of a pod's container: its state, pid,
// oom_score_adj, memory.oom.group and memory.max.
func (c *Cluster) Inspect(ctx context.Context, ns, pod, container string) (map[string]string, error) {
	id, err := c.ContainerID(ctx, ns, pod, container)
	if err != nil {
		return nil, err
	}
	out, err := c.Node.Run(ctx, fmt.Sprintf("printf %%s %s > /run/pod-x && kubeletish inspect x", id))
	if err != nil {
		return nil, err
	}
	m := inspectRE.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("inspect %s/%s: %s", ns, pod, out)
	}
	r := map[string]string{}
	for _, f := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(f, "=")
		r[k] = v
	}
	return r, nil
}

// ContainerID is the runtime's ID of a pod's container, from the pod's status.
func (c *Cluster) ContainerID(ctx context.Context, ns, pod, container string) (string, error) {
	out, err := c.Kubectl(ctx, "-n", ns, "get", "pod", pod, "-o",
		fmt.Sprintf(`jsonpath={.status.containerStatuses[?(@.name=="%s")].containerID}`, container))
	if err != nil {
		return "", err
	}
	_, id, ok := strings.Cut(strings.TrimSpace(string(out)), "://")
	if !ok || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(id) {
		return "", fmt.Errorf("pod %s/%s has no container %s yet (%q)", ns, pod, container, out)
	}
	return id, nil
}

// WaitNodeReady waits until the node is Ready and the default namespace
// can hold pods (its service account exists).
func (c *Cluster) WaitNodeReady(ctx context.Context) error {
	err := c.Poll(ctx, 3*time.Minute, "the node to register", func() (bool, error) {
		_, err := c.Kubectl(ctx, "get", "node", NodeName)
		return err == nil, nil
	})
	if err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "node/"+NodeName, "--timeout=5m"); err != nil {
		out, _ := c.Kubectl(ctx, "get", "node", NodeName, "-o", "yaml")
		return fmt.Errorf("%w\n%s", err, out)
	}
	return c.WaitServiceAccounts(ctx, "default")
}

// StartPod creates p through the API server and waits until it is Ready;
// it returns how long that took, as the operator who created it sees it.
func (c *Cluster) StartPod(ctx context.Context, p Pod) (time.Duration, error) {
	start := time.Now()
	if err := c.Apply(ctx, p.Manifest()); err != nil {
		return 0, err
	}
	if err := c.WaitReady(ctx, p.Namespace, p.Name); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// WaitReady waits for a pod to be Ready, and says why it is not when it
// is not within 5 minutes.
func (c *Cluster) WaitReady(ctx context.Context, ns, name string) error {
	if _, err := c.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=5m"); err != nil {
		out, _ := c.Kubectl(ctx, "-n", ns, "describe", "pod", name)
		// A pod deleted meanwhile (preempted, evicted) has no description: its events say why.
		events, _ := c.Kubectl(ctx, "-n", ns, "get", "events", "--field-selector", "involvedObject.name="+name, "--sort-by=.lastTimestamp")
		return fmt.Errorf("pod %s/%s: %w\n%s\nits events:\n%s", ns, name, err, out, events)
	}
	return nil
}

// Poll calls f every second until it says done, it fails, or timeout.
func (c *Cluster) Poll(ctx context.Context, timeout time.Duration, what string, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s", what, timeout)
		case <-time.After(time.Second):
		}
	}
}

// Figure records a measured duration for the bench.
func (c *Cluster) Figure(name string, d time.Duration) {
	c.figures[name] = d
}

// Dir is the boot's work directory on the host, removed with it.
func (c *Cluster) Dir() string { return c.dir }
