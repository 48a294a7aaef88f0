package scenarios

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/imagepatch/admission"
	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/vm"
	"github.com/oomguard/oomguard/test/webhooktest"
)

// Patch on use through the cluster: the chart's own webhook Deployment (a
// release of the chart with the webhook only, on the node's network, as on
// clusters whose control plane does not reach pod IPs) runs on the node;
// the API server calls it through its Service, resolved to the endpoint
// and reached through the control plane's egress (test/controlplane). The
// webhook makes its own CA and serving certificate. Debian's registry runs
// on the host; the webhook and the node's runtime reach it at hostIP. All
// before oomguard's node agent is on the node (no NRI, no hook), so what a
// pod's processes show is the patched image's doing alone.

// patchedInit is the old base image's init: a child under it, both waiting.
const patchedInit = "#!/bin/sh\nsleep 2147483647 &\nwait\n"

// registryMirror points the node's runtime at the host's registry, over
// plain HTTP, under the name NAME (which the node reaches at hostIP).
const registryMirror = `
mirror_registry() { # NAME PORT
	case $RUNTIME in
	containerd)
		mkdir -p /etc/containerd/certs.d/$1
		printf 'server = "http://%s:%s"\n[host."http://%s:%s"]\n  capabilities = ["pull", "resolve"]\n' ` + vm.HostIP + ` $2 ` + vm.HostIP + ` $2 > /etc/containerd/certs.d/$1/hosts.toml ;;
	crio)
		mkdir -p /etc/containers/registries.conf.d
		printf '[[registry]]\nprefix = "%s"\nlocation = "%s:%s"\ninsecure = true\n' $1 ` + vm.HostIP + ` $2 > /etc/containers/registries.conf.d/oomguard-test.conf
		kill -HUP $(cat /run/crio.pid); sleep 1 ;;
	esac
}
# unmirror_registry NAME: the node's configuration as it was.
unmirror_registry() {
	case $RUNTIME in
	containerd) rm -r /etc/containerd/certs.d/$1; rmdir /etc/containerd/certs.d ;;
	crio) rm /etc/containers/registries.conf.d/oomguard-test.conf; rmdir /etc/containers/registries.conf.d; kill -HUP $(cat /run/crio.pid) ;;
	esac
}
# container_procs ID PID: each process of the container whose first is
# PID, its oom_score_adj and command line; then the OCI process args the
# runtime was given.
container_procs() {
	cg=$(sed -n 's/^0:://p' /proc/$2/cgroup)
	for p in $(cat /sys/fs/cgroup$cg/cgroup.procs); do
		echo "proc $(cat /proc/$p/oom_score_adj) nspid=$(awk '/^NSpid:/ { print $NF }' /proc/$p/status) $(tr '\0' ' ' < /proc/$p/cmdline)"
	done
	f=$(ls /run/containerd/io.containerd.runtime.v2.task/k8s.io/$1/config.json /var/lib/containers/storage/*-containers/$1/userdata/config.json 2>/dev/null | head -1)
	echo "spec $f $(tr -d ' \t\n' < "$f" | grep -o '"args":\[[^]]*\]' | head -1)" # CRI-O indents it
}
# webhook_log: what the chart's webhook containers logged.
webhook_log() {
	for f in /var/log/pods/oomguard-patch_*/webhook/*.log; do
		[ -f "$f" ] && sed -n 's/^[^ ]* std[a-z]* [FP] //p' "$f"
	done
}
`

const patchedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: vm, namespace: patched}
spec:
  replicas: 1
  selector: {matchLabels: {app: vm}}
  template:
    metadata: {labels: {app: vm}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      automountServiceAccountToken: false
      containers:
      - name: main
        image: %s
        resources: {limits: {cpu: ` + clusterCPU + `, memory: 48Mi}}
`

// webhookRelease is the chart's release that holds the webhook alone.
const (
	webhookRelease   = "patch"
	webhookNamespace = "oomguard-patch"
	webhookName      = webhookRelease + "-oomguard-imagepatch-webhook" // the chart's names
)

// patchOnUse: the chart's webhook is installed with helm --wait; a
// Deployment on an old tag of a base image runs on its patched image,
// pinned by digest: the runtime was given the shim before the image's
// init, the init is PID 1 and every process is at the shim's score, not
// kubelet's -997. A second pod, with a command of its own, gets the shim in
// front of it from the cache, without a registry write. With the webhook
// scaled to nothing, a pod is created as it came. helm uninstall takes the
// webhook's configuration and its Secret.
func (r *clusterRun) patchOnUse(ctx context.Context) error {
	regDir := filepath.Join(r.Dir(), "registry")
	if err := os.MkdirAll(regDir, 0o755); err != nil {
		return err
	}
	reg, err := registrytest.Start(regDir)
	if err != nil {
		return err
	}
	defer reg.Stop()
	img, err := runcbundle.BusyboxImage(map[string]runcbundle.ImageFile{"/sbin/init": {Data: []byte(patchedInit), Mode: 0o755}}, []string{"/sbin/init"})
	if err != nil {
		return err
	}
	tag, err := name.NewTag(reg.Host+"/base/vm:old", name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(tag, img); err != nil {
		return fmt.Errorf("pushing %s: %w", tag, err)
	}
	// The same registry, by the name the node and the webhook's pod reach.
	_, port, _ := net.SplitHostPort(reg.Host)
	nodeReg := net.JoinHostPort(vm.HostIP, port)
	src := nodeReg + "/base/vm:old"
	if _, err := r.sh(ctx, registryMirror+"mirror_registry "+nodeReg+" "+port); err != nil {
		return err
	}
	fail := func(err error) error {
		log, _ := r.sh(ctx, registryMirror+"webhook_log | tail -20")
		return fmt.Errorf("%w\nthe webhook's log:\n%s", err, log)
	}
	if _, err := r.Helm(ctx, "install", webhookRelease, "deploy/helm/oomguard", "--namespace", webhookNamespace, "--create-namespace",
		"--wait", "--timeout", "5m",
		"--set", "nodeAgent.enabled=false",
		"--set", "imagepatchWebhook.enabled=true",
		"--set", "imagepatchWebhook.images={"+nodeReg+"/base/*}",
		"--set", "imagepatchWebhook.insecureRegistries=true",
		"--set", "imagepatchWebhook.replicas=1",
		"--set", "imagepatchWebhook.hostNetwork=true",
		"--set", fmt.Sprintf("imagepatchWebhook.port=%d", vm.WebhookPort),
		"--set", fmt.Sprintf("apiServer=https://%s:%d", vm.HostIP, r.Port),
		// The node is one emulated core: a patch takes seconds there.
		"--set", "imagepatchWebhook.deadline=25s",
		"--set", "imagepatchWebhook.timeoutSeconds=30"); err != nil {
		return fail(err)
	}
	if err := r.Apply(ctx, webhooktest.Namespace("patched", true)); err != nil {
		return err
	}
	if err := r.WaitServiceAccounts(ctx, "patched"); err != nil {
		return err
	}

	if err := r.Apply(ctx, fmt.Sprintf(patchedDeployment, src)); err != nil {
		return fail(err)
	}
	var pod string
	if err := r.Poll(ctx, 2*time.Minute, "the Deployment's pod", func() (bool, error) {
		out, err := r.Kubectl(ctx, "-n", "patched", "get", "pods", "-l", "app=vm", "-o", "jsonpath={.items[*].metadata.name}")
		pod = strings.TrimSpace(string(out))
		return err == nil && pod != "", nil
	}); err != nil {
		return fail(err)
	}
	if err := r.WaitReady(ctx, "patched", pod); err != nil {
		return fail(err)
	}
	out, err := r.Kubectl(ctx, "-n", "patched", "get", "pod", pod, "-o", "jsonpath={.spec.containers[0].image} {.status.containerStatuses[0].imageID}")
	if err != nil {
		return err
	}
	image, imageID, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	patched, err := name.NewDigest(image, name.Insecure)
	if err != nil || patched.Context().Name() != nodeReg+"/base/vm" || !strings.HasSuffix(imageID, patched.DigestStr()) {
		return fail(fmt.Errorf("the Deployment's pod runs %q (image ID %q), want %s/base/vm pinned by its patched digest", image, imageID, nodeReg))
	}
	if err := r.patchedProcs(ctx, "patched", pod); err != nil {
		return err
	}

	reg.Reset()
	withCommand := vm.Pod{Name: "command", Namespace: "patched", Image: src, Command: []string{"/sbin/init"}, Memory: "48Mi", CPU: clusterCPU}
	if err := r.Apply(ctx, strings.Replace(withCommand.Manifest(), "imagePullPolicy: Never", "imagePullPolicy: IfNotPresent", 1)); err != nil {
		return fail(err)
	}
	if err := r.WaitReady(ctx, "patched", "command"); err != nil {
		return fail(err)
	}
	if err := r.patchedProcs(ctx, "patched", "command"); err != nil {
		return err
	}
	if n := reg.Count("PUT", "") + reg.Count("POST", "") + reg.Count("PATCH", ""); n != 0 {
		return fmt.Errorf("the second pod on the image wrote to the registry %d times: %v", n, reg.Requests())
	}
	r.Note("%s: patch on use through the chart's webhook Deployment: the Deployment on %s ran %s, its init PID 1 at the shim's 900",
		r.rt.Component, src, patched.DigestStr()[:19])

	if err := r.webhookDown(ctx, src); err != nil {
		return fail(err)
	}
	// Nothing of this step stays for the others: the node's one CPU, the
	// webhook's registration, the runtime's mirror (uninstall compares the
	// node's configuration with what it was before oomguard).
	if _, err = r.Kubectl(ctx, "delete", "namespace", "patched", "--wait=false"); err != nil {
		return err
	}
	if _, err := r.Helm(ctx, "uninstall", webhookRelease, "--namespace", webhookNamespace, "--wait"); err != nil {
		return err
	}
	// The Secret with the webhook's CA is owned by its configuration: the
	// garbage collector takes it with the release.
	if err := r.Poll(ctx, time.Minute, "the webhook's Secret gone with its configuration", func() (bool, error) {
		_, err := r.Kubectl(ctx, "-n", webhookNamespace, "get", "secret", webhookName+"-tls")
		return err != nil && strings.Contains(err.Error(), "NotFound"), nil
	}); err != nil {
		return err
	}
	if _, err = r.Kubectl(ctx, "delete", "namespace", webhookNamespace, "--wait=false"); err != nil {
		return err
	}
	_, err = r.sh(ctx, registryMirror+"unmirror_registry "+nodeReg)
	return err
}

// webhookDown: with the webhook's Deployment scaled to nothing, a pod on
// the same image is created as it came (failurePolicy Ignore).
func (r *clusterRun) webhookDown(ctx context.Context, src string) error {
	if _, err := r.Kubectl(ctx, "-n", webhookNamespace, "scale", "deployment", webhookName, "--replicas=0"); err != nil {
		return err
	}
	if err := r.Poll(ctx, 2*time.Minute, "the webhook's pods gone", func() (bool, error) {
		out, err := r.Kubectl(ctx, "-n", webhookNamespace, "get", "pods", "-o", "name")
		return err == nil && strings.TrimSpace(string(out)) == "", nil
	}); err != nil {
		return err
	}
	down := vm.Pod{Name: "down", Namespace: "patched", Image: src, Command: []string{"/sbin/init"}, Memory: "48Mi", CPU: clusterCPU}
	if err := r.Apply(ctx, down.Manifest()); err != nil {
		return fmt.Errorf("with the webhook down the pod must still be created: %w", err)
	}
	out, err := r.Kubectl(ctx, "-n", "patched", "get", "pod", "down", "-o", `jsonpath={.spec.containers[0].image} {.spec.containers[0].command} {.metadata.annotations.oomguard\.io/original-images}`)
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(out)); got != src+` ["/sbin/init"]` {
		return fmt.Errorf("with the webhook down the pod was changed: %q, want its image %s and command as they came, no %s", got, src, admission.AnnotationOriginal)
	}
	_, err = r.Kubectl(ctx, "-n", "patched", "delete", "pod", "down", "--wait=false")
	return err
}

// shimArgs are the OCI process args of a patched image's container: the
// shim in front of the image's init, under the name podman takes for
// systemd where the image's own command is an init, as oomguard-init where
// the webhook put it in front of a pod's command.
var shimArgs = regexp.MustCompile(`"args":\["/\.oomguard/(systemd|oomguard-init)","--","/sbin/init"\]`)

// patchedProcs: the pod's container was started with shimArgs, its init is
// PID 1 in the container, and every process of it is at the shim's score;
// the shim itself is gone (it executed the init).
func (r *clusterRun) patchedProcs(ctx context.Context, ns, pod string) error {
	id, err := r.ContainerID(ctx, ns, pod, "main")
	if err != nil {
		return err
	}
	ctr, err := r.Inspect(ctx, ns, pod, "main")
	if err != nil {
		return err
	}
	var out string
	// The init starts its child just after it is Ready; a process in the
	// middle of its exec shows no command line yet (CRI-O's run saw one).
	named := func(out string) (n int) {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 4 && f[0] == "proc" {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if out, err = r.sh(ctx, registryMirror+"container_procs "+id+" "+ctr["pid"]); err != nil {
			return err
		}
		if named(out) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	var pid1 int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "spec":
			if !shimArgs.MatchString(l) {
				return fmt.Errorf("pod %s/%s: the runtime was given %s, want %s", ns, pod, l, shimArgs)
			}
		case len(f) >= 4 && f[0] == "proc":
			if f[1] != "900" || strings.Contains(l, "oomguard-init") || strings.Contains(l, "/.oomguard/") {
				return fmt.Errorf("pod %s/%s: process %q, want every process at the shim's 900 and no shim left:\n%s", ns, pod, l, out)
			}
			if f[2] == "nspid=1" && strings.Contains(l, "/sbin/init") {
				pid1++
			}
		}
	}
	if named(out) < 2 || pid1 != 1 {
		return fmt.Errorf("pod %s/%s: want the image's init as PID 1 and its child:\n%s", ns, pod, out)
	}
	return nil
}
