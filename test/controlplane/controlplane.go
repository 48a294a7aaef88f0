// Package controlplane runs a real Kubernetes control plane for the tests:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
// from pinned modules (make components: build/components/kubernetes), on
// this host's loopback, serving TLS with certificates it makes, and stopped
// with the test (or with the test's process, if that dies first).
package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/testbin"
)

// Options says where the binaries are and what the API server's
// certificate must also name.
type Options struct {
	// Bin holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubectl.
	Bin string
	// Dir is scratch space: certificates, kubeconfigs, etcd's data, logs.
	Dir string
	// Hosts are the addresses clients elsewhere reach the API server by
	// (10.0.2.2 from a QEMU guest on user networking), for its certificate.
	Hosts []string
	// Reach, when set, is how the API server gets to the cluster's network
	// (egress.go): a webhook's Service is then resolved to its endpoints
	// and dialled through it, as it is in a cluster with a pod network.
	Reach func(ctx context.Context, addr string) (net.Conn, error)
}

// Cluster is a running control plane.
type Cluster struct {
	Dir    string
	Port   int    // the API server's, on 127.0.0.1
	Admin  string // an admin's kubeconfig (system:masters)
	bin    string
	ca     *ca
	procs  []*process
	client *http.Client
	egress *egressProxy
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// Start starts etcd, then the API server, and once it is ready the
// controller manager and the scheduler; it stops what it started if any fails.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"} {
		if _, err := os.Stat(filepath.Join(o.Bin, b)); err != nil {
			return nil, fmt.Errorf("%s is missing: run make components", filepath.Join(o.Bin, b))
		}
	}
	pki := filepath.Join(o.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	authority, err := newCA()
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: o.Dir, Port: ports[0], bin: o.Bin, ca: authority}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	caFile := filepath.Join(pki, "ca.crt")
	if err := os.WriteFile(caFile, authority.pem, 0o644); err != nil {
		return nil, err
	}
	files := map[string][2]string{}
	for _, p := range []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"etcd", "etcd", nil, []string{"127.0.0.1", "localhost"}},
		{"etcd-client", "kube-apiserver-etcd-client", nil, nil},
		{"apiserver", "kube-apiserver", nil, append([]string{"127.0.0.1", "localhost", "10.96.0.1", "kubernetes",
			"kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, o.Hosts...)},
		{"admin", "kubernetes-admin", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
	} {
		pr, err := authority.issue(p.cn, p.orgs, p.hosts...)
		if err != nil {
			return nil, err
		}
		crt, key, err := pr.write(pki, p.name)
		if err != nil {
			return nil, err
		}
		files[p.name] = [2]string{crt, key}
		if p.hosts == nil && p.name != "etcd-client" {
			server := "https://127.0.0.1:" + strconv.Itoa(c.Port)
			if err := os.WriteFile(filepath.Join(o.Dir, p.name+".conf"), kubeconfig(server, authority.pem, p.cn, pr), 0o600); err != nil {
				return nil, err
			}
		}
	}
	c.Admin = filepath.Join(o.Dir, "admin.conf")
	saKey, saPub, err := serviceAccountKeys(pki)
	if err != nil {
		return nil, err
	}
	etcdURL := "https://127.0.0.1:" + strconv.Itoa(ports[1])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[2])
	if err := c.start("etcd", "--name=cp", "--data-dir="+filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL, "--initial-cluster=cp="+peerURL,
		"--cert-file="+files["etcd"][0], "--key-file="+files["etcd"][1], "--client-cert-auth", "--trusted-ca-file="+caFile,
		"--unsafe-no-fsync", "--log-level=error"); err != nil {
		return nil, err
	}
	var routing []string
	if o.Reach != nil {
		var cfg string
		if c.egress, cfg, err = startEgress(o.Dir, o.Reach); err != nil {
			return nil, err
		}
		routing = []string{"--egress-selector-config-file=" + cfg, "--enable-aggregator-routing=true"}
	}
	if err := c.start("kube-apiserver", append([]string{"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.Port),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--etcd-servers=" + etcdURL, "--etcd-cafile=" + caFile, "--etcd-certfile=" + files["etcd-client"][0], "--etcd-keyfile=" + files["etcd-client"][1],
		"--client-ca-file=" + caFile, "--tls-cert-file=" + files["apiserver"][0], "--tls-private-key-file=" + files["apiserver"][1],
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey, "--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
		"--enable-priority-and-fairness=false", "--profiling=false", "--cert-dir=" + pki, "--v=1"}, routing...)...); err != nil {
		return nil, err
	}
	if err := c.ready(ctx, files["admin"]); err != nil {
		return nil, err
	}
	if err := c.start("kube-controller-manager", "--kubeconfig="+filepath.Join(o.Dir, "controller-manager.conf"),
		"--authentication-kubeconfig="+filepath.Join(o.Dir, "controller-manager.conf"),
		"--authorization-kubeconfig="+filepath.Join(o.Dir, "controller-manager.conf"),
		"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file="+saKey, "--root-ca-file="+caFile,
		"--controllers=daemonset-controller,deployment-controller,job-controller,node-lifecycle-controller,replicaset-controller,serviceaccount-controller,"+
			"endpointslice-controller,"+
			"serviceaccount-token-controller,namespace-controller,garbage-collector-controller,root-ca-certificate-publisher-controller,"+
			"clusterrole-aggregation-controller", "--profiling=false"); err != nil {
		return nil, err
	}
	if err := c.start("kube-scheduler", "--kubeconfig="+filepath.Join(o.Dir, "scheduler.conf"),
		"--authentication-kubeconfig="+filepath.Join(o.Dir, "scheduler.conf"),
		"--authorization-kubeconfig="+filepath.Join(o.Dir, "scheduler.conf"),
		"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false", "--profiling=false"); err != nil {
		return nil, err
	}
	return c, nil
}

// start runs one of the binaries, its output in Dir/NAME.log; it dies with
// this process.
func (c *Cluster) start(name string, args ...string) error {
	log := filepath.Join(c.Dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

// ready waits until the API server says it is ready, or a process exits.
func (c *Cluster) ready(ctx context.Context, admin [2]string) error {
	cert, err := tls.LoadX509KeyPair(admin[0], admin[1])
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.ca.cert)
	c.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last string
	for {
		for _, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, tail(p.log, 30))
			default:
			}
		}
		resp, err := c.client.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", c.Port))
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server was not ready in 3 minutes: %s\n%s", last, tail(filepath.Join(c.Dir, "kube-apiserver.log"), 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Check says which process has exited, with the end of its log.
func (c *Cluster) Check() error {
	var errs []error
	for _, p := range c.procs {
		select {
		case <-p.done:
			errs = append(errs, fmt.Errorf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, tail(p.log, 30)))
		default:
		}
	}
	return errors.Join(errs...)
}

// Stop stops every process, the last started first.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	c.procs = nil
	if c.egress != nil {
		c.egress.stop()
		c.egress = nil
	}
}

// NodeKubeconfig is the kubeconfig of the kubelet of node: its client
// certificate (system:node:NODE in system:nodes, as the Node authorizer
// wants), the server as the node reaches it.
func (c *Cluster) NodeKubeconfig(server, node string) ([]byte, error) {
	p, err := c.ca.issue("system:node:"+node, []string{"system:nodes"})
	if err != nil {
		return nil, err
	}
	return kubeconfig(server, c.ca.pem, "system:node:"+node, p), nil
}

// CA is the cluster's certificate authority, PEM-encoded.
func (c *Cluster) CA() []byte { return c.ca.pem }

// Request sends body (JSON, or nil) to the API server as the admin and
// returns its answer; a status other than 2xx is an error with the answer.
func (c *Cluster) Request(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("https://127.0.0.1:%d%s", c.Port, path), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	client := *c.client
	client.Timeout = 0 // ctx's: deleting a thousand pods takes longer than a readiness check
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err == nil && resp.StatusCode/100 != 2 {
		err = fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(out[:min(len(out), 512)]))
	}
	return out, err
}

// Kubectl runs kubectl as the admin; the error carries its stderr.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "kubectl"), append([]string{"--kubeconfig", c.Admin}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Admitted creates the object in manifest as a server-side dry run, and
// returns its annotations as the API server's admission left them, or the
// API server's refusal.
func (c *Cluster) Admitted(ctx context.Context, manifest string) (map[string]string, error) {
	out, err := c.Kubectl(ctx, []byte(manifest), "create", "--dry-run=server", "-o", "json", "-f", "-")
	if err != nil {
		return nil, err
	}
	var got struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		return nil, fmt.Errorf("the admitted object: %w\n%s", err, out)
	}
	return got.Metadata.Annotations, nil
}

// AwaitMutation waits, a minute at most, until the API server has read a
// mutating policy: manifest admitted carries the annotation key.
func (c *Cluster) AwaitMutation(ctx context.Context, t testing.TB, manifest, key string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		a, err := c.Admitted(ctx, manifest)
		if err == nil && a[key] != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no annotation %s added after a minute: %v %v\n%s", key, a, err, c.Logs(20))
		}
	}
}

// KubectlFor is Kubectl for a test: stdin "" for none, the output trimmed;
// a failure ends the test, with the end of the control plane's logs.
func (c *Cluster) KubectlFor(ctx context.Context, t testing.TB) func(stdin string, args ...string) string {
	return func(stdin string, args ...string) string {
		t.Helper()
		var in []byte
		if stdin != "" {
			in = []byte(stdin)
		}
		out, err := c.Kubectl(ctx, in, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, c.Logs(10))
		}
		return strings.TrimSpace(string(out))
	}
}

// ServiceAccountFiles waits for namespace ns's service accounts and writes
// a token of account (valid an hour) and the cluster's CA into dir, as a
// pod's service account mount holds them.
func (c *Cluster) ServiceAccountFiles(ctx context.Context, ns, account, dir string) (token, ca string, err error) {
	if err := c.WaitServiceAccounts(ctx, ns); err != nil {
		return "", "", err
	}
	out, err := c.Kubectl(ctx, nil, "-n", ns, "create", "token", account, "--duration", "1h")
	if err != nil {
		return "", "", err
	}
	token, ca = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(token, bytes.TrimSpace(out), 0o600); err != nil {
		return "", "", err
	}
	return token, ca, os.WriteFile(ca, c.CA(), 0o644)
}

// NodeAgentFiles writes what a DaemonSet's pod on node gets: a token of
// account bound to a pod of it there (the API server names the node in
// it, as the chart's node-scoped policy requires), and the cluster's CA.
// The Node and the pod are made if missing; no kubelet runs the pod.
func (c *Cluster) NodeAgentFiles(ctx context.Context, ns, account, node, dir string) (token, ca string, err error) {
	if err := c.WaitServiceAccounts(ctx, ns); err != nil {
		return "", "", err
	}
	pod := account + "-" + node
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Node
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Pod
metadata: {name: %[2]s, namespace: %[3]s}
spec:
  nodeName: %[1]s
  serviceAccountName: %[4]s
  tolerations: [{operator: Exists}]
  containers: [{name: agent, image: oomguard.invalid/agent}]
`, node, pod, ns, account)
	if out, err := c.Kubectl(ctx, []byte(manifest), "apply", "-f", "-"); err != nil {
		return "", "", fmt.Errorf("a pod of %s on %s: %w: %s", account, node, err, out)
	}
	out, err := c.Kubectl(ctx, nil, "-n", ns, "create", "token", account, "--duration", "1h", "--bound-object-kind", "Pod", "--bound-object-name", pod)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	token, ca = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(token, bytes.TrimSpace(out), 0o600); err != nil {
		return "", "", err
	}
	return token, ca, os.WriteFile(ca, c.CA(), 0o644)
}

// WaitServiceAccounts waits, 2 minutes at most, until each namespace has
// its default service account: until then the API server refuses pods
// there.
func (c *Cluster) WaitServiceAccounts(ctx context.Context, namespaces ...string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, ns := range namespaces {
		for {
			if out, err := c.Kubectl(ctx, nil, "-n", ns, "get", "serviceaccount", "default", "-o", "name"); err == nil && len(out) > 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("namespace %s has no default service account after 2m", ns)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// Logs is the end of each process's log, for a failure's report.
func (c *Cluster) Logs(lines int) string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		fmt.Fprintf(&b, "--- %s\n%s\n", name, tail(filepath.Join(c.Dir, name+".log"), lines))
	}
	return b.String()
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts finds n ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort is a port free on 127.0.0.1 now.
func FreePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// ForTest starts a control plane for t from make components' build (or
// $OOMGUARD_KUBE_BIN), with o's other options; it stops when t ends.
func ForTest(ctx context.Context, t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Bin = os.Getenv("OOMGUARD_KUBE_BIN"); o.Bin == "" {
		var err error
		if o.Bin, err = testbin.Component("kubernetes", ""); err != nil {
			t.Fatal(err)
		}
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}
