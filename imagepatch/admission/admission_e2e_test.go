//go:build e2e

package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/test/controlplane"
	"github.com/oomguard/oomguard/test/registrytest"
	"github.com/oomguard/oomguard/test/testbin"
	"github.com/oomguard/oomguard/test/webhooktest"
)

// TestE2EWebhook: the webhook through a real kube-apiserver (and its
// controller manager, which makes a Deployment's pods) and Debian's
// registry. A Deployment on an old tag gets its pods on the patched image,
// by digest, the original annotated; the next pod costs no registry write;
// a command gets the shim in front; an image by digest and a multi-arch
// index map to their patched digest and index; the webhook down, pods are
// created unchanged; two replicas patching one source at once push one tag,
// one digest. The burst of pods through the API server with the webhook
// against without is noted.
func TestE2EWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cp := controlplane.ForTest(ctx, t, controlplane.Options{})
	reg, err := registrytest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	bin, err := testbin.Program(t.TempDir(), "imagepatch")
	if err != nil {
		t.Fatal(err)
	}

	// The images: an old base by tag, a multi-arch index, one known by digest only.
	base := func(cmd ...string) v1.Image {
		img, _ := random.Image(512, 2)
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Config.Cmd = "linux", "amd64", cmd
		img, _ = mutate.ConfigFile(img, cf)
		return img
	}
	ref := func(s string) string { return reg.Host + "/base/" + s }
	push := func(r string, img v1.Image) v1.Hash {
		tag, err := name.NewTag(ref(r), name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(tag, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d
	}
	push("ubuntu:20.04", base("/sbin/init"))
	pinned := push("pinned:gone", base("/sbin/init"))
	arm := base("/sbin/init")
	cf, _ := arm.ConfigFile()
	cf = cf.DeepCopy()
	cf.Architecture = "arm64"
	arm, _ = mutate.ConfigFile(arm, cf)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: base("/sbin/init"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	idxTag, _ := name.NewTag(ref("multi:v1"), name.Insecure)
	if err := remote.WriteIndex(idxTag, idx); err != nil {
		t.Fatal(err)
	}

	start := func() *webhooktest.Webhook {
		w, err := webhooktest.Start(bin, t.TempDir(), "--insecure", "--images", reg.Host+"/base/*", "--skip-namespaces", "oomguard")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			w.Stop()
			if t.Failed() {
				t.Logf("webhook on %d:\n%s", w.Port, w.Log())
			}
		})
		return w
	}
	webhook := start()

	kubectl := cp.KubectlFor(ctx, t)
	kubectl(webhook.Config("oomguard-imagepatch")+"---\n"+webhooktest.Namespace("ml", true)+"---\n"+webhooktest.Namespace("plain", false), "apply", "-f", "-")
	if err := cp.WaitServiceAccounts(ctx, "ml", "plain"); err != nil {
		t.Fatal(err)
	}

	// A Deployment on the old tag: its pod runs the patched image by digest.
	kubectl(fmt.Sprintf(deployment, ref("ubuntu:20.04")), "apply", "-f", "-")
	var podImage, annotation string
	waitFor(t, "the Deployment's pod", func() bool {
		out, err := cp.Kubectl(ctx, nil, "-n", "ml", "get", "pods", "-l", "app=web", "-o",
			`jsonpath={.items[0].spec.containers[0].image} {.items[0].metadata.annotations.oomguard\.io/original-images}`)
		podImage, annotation, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
		return err == nil && podImage != ""
	})
	patched, err := name.NewDigest(podImage, name.Insecure)
	if err != nil || patched.Context().Name() != ref("ubuntu") {
		t.Fatalf("the Deployment's pod runs %q, want %s pinned by digest", podImage, ref("ubuntu"))
	}
	if annotation != `{"main":"`+ref("ubuntu:20.04")+`"}` {
		t.Fatalf("original-images annotation %q", annotation)
	}
	dst, _ := name.NewTag(ref("ubuntu:20.04-oomguard-init."+imagepatch.ShimSpec().Version), name.Insecure)
	if d, err := remote.Head(dst); err != nil || d.Digest.String() != patched.DigestStr() {
		t.Fatalf("the patched tag %s: %v %v, want %s", dst, d, err, patched.DigestStr())
	}
	img, err := remote.Image(patched)
	if err != nil {
		t.Fatal(err)
	}
	pcf, _ := img.ConfigFile()
	// Its command is an init: the shim under the name podman takes for systemd.
	if !slices.Equal(pcf.Config.Entrypoint, imagepatch.ShimSpec().Config.InitEntrypointPrefix) || pcf.Config.Labels[imagepatch.LabelBaseName] != ref("ubuntu:20.04") {
		t.Fatalf("the patched image: entrypoint %q, labels %v", pcf.Config.Entrypoint, pcf.Config.Labels)
	}

	// A second pod: from the cache, no registry write.
	reg.Reset()
	kubectl("", "-n", "ml", "scale", "deployment", "web", "--replicas=2")
	waitFor(t, "the second pod", func() bool {
		out, _ := cp.Kubectl(ctx, nil, "-n", "ml", "get", "pods", "-l", "app=web", "-o", `jsonpath={.items[*].spec.containers[0].image}`)
		f := strings.Fields(string(out))
		return len(f) == 2 && f[0] == podImage && f[1] == podImage
	})
	if n := reg.Count("PUT", "") + reg.Count("POST", "") + reg.Count("PATCH", ""); n != 0 {
		t.Fatalf("the second pod wrote to the registry %d times: %v", n, reg.Requests())
	}

	// A command: the shim in front. By digest; a multi-arch index.
	podSpec := func(name, image, command string) string {
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"ml"},"spec":{"containers":[{"name":"main","image":%q%s}]}}`, name, image, command)
	}
	getPod := func(ns, name, path string) string {
		return kubectl("", "-n", ns, "get", "pod", name, "-o", "jsonpath="+path)
	}
	kubectl(podSpec("cmd", ref("ubuntu:20.04"), `,"command":["/bin/sh","-c","exec sleep 1d"]`), "create", "-f", "-")
	if got := getPod("ml", "cmd", "{.spec.containers[0].command}"); got != `["/.oomguard/oomguard-init","--","/bin/sh","-c","exec sleep 1d"]` {
		t.Fatalf("a pod's command: %s, want the shim in front", got)
	}
	kubectl(podSpec("pinned", ref("pinned@"+pinned.String()), ""), "create", "-f", "-")
	pd := getPod("ml", "pinned", "{.spec.containers[0].image}")
	if !strings.HasPrefix(pd, ref("pinned@sha256:")) || pd == ref("pinned@"+pinned.String()) {
		t.Fatalf("a pod by digest runs %s, want the patched digest", pd)
	}
	kubectl(podSpec("multi", ref("multi:v1"), ""), "create", "-f", "-")
	md, err := name.NewDigest(getPod("ml", "multi", "{.spec.containers[0].image}"), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if desc, err := remote.Get(md); err != nil || !desc.MediaType.IsIndex() {
		t.Fatalf("the multi-arch pod runs %s: %v, want the patched index", md, err)
	}
	// Left alone: a namespace not opted in, kube-system.
	kubectl(strings.Replace(podSpec("plain", ref("ubuntu:20.04"), ""), `"namespace":"ml"`, `"namespace":"plain"`, 1), "create", "-f", "-")
	if got := getPod("plain", "plain", "{.spec.containers[0].image}"); got != ref("ubuntu:20.04") {
		t.Fatalf("a namespace not opted in: %s", got)
	}

	// Two replicas patching one source at once: one tag, one digest.
	push("fresh:v1", base("/sbin/init"))
	webhook2 := start()
	body := reviewOf(t, "ml", "CREATE", "", podSpec("x", ref("fresh:v1"), ""), "")
	var wg sync.WaitGroup
	answers := make([]string, 2)
	for i, w := range []*webhooktest.Webhook{webhook, webhook2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = patchOf(t, w, body)
		}()
	}
	wg.Wait()
	if answers[0] == "" || answers[0] != answers[1] {
		t.Fatalf("two replicas answered:\n%s\n%s", answers[0], answers[1])
	}
	fresh, _ := name.NewTag(ref("fresh:v1-oomguard-init."+imagepatch.ShimSpec().Version), name.Insecure)
	if d, err := remote.Head(fresh); err != nil || !strings.Contains(answers[0], d.Digest.String()) {
		t.Fatalf("the tag %s: %v %v; the replicas answered %s", fresh, d, err, answers[0])
	}

	// The burst: 200 pods through the API server into the opted-in
	// namespace (each reviewed, from the cache) and into the other.
	burst := func(ns string) time.Duration {
		var b strings.Builder
		for i := range 200 {
			fmt.Fprintf(&b, "%s\n---\n", strings.Replace(podSpec(fmt.Sprintf("burst-%d", i), ref("ubuntu:20.04"), ""), `"namespace":"ml"`, `"namespace":"`+ns+`"`, 1))
		}
		t0 := time.Now()
		kubectl(b.String(), "create", "-f", "-")
		return time.Since(t0)
	}
	without := burst("plain")
	with := burst("ml")
	t.Logf("200 pods through the API server: %s with the webhook, %s without: %.2f× (goal ≤ 1.1×)", with.Round(time.Millisecond), without.Round(time.Millisecond), float64(with)/float64(without))
	if got := getPod("ml", "burst-199", "{.spec.containers[0].image}"); got != podImage {
		t.Fatalf("burst-199 runs %s, want %s", got, podImage)
	}

	// The chart's webhook, as the API server validates it (it has no node to
	// run it), guarded: the client CA, the NetworkPolicy.
	rendered := testbin.Chart(t, "kube-system",
		"--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={"+reg.Host+"/base/*}", "--set", "imagepatchWebhook.registryCredentialsSecret=regcred",
		"--set", "imagepatchWebhook.clientCA.configMap=apiserver-client-ca", "--set", "imagepatchWebhook.clientCA.names={kube-apiserver}",
		"--set", "imagepatchWebhook.networkPolicy.enabled=true", "--set", "imagepatchWebhook.networkPolicy.apiServerCIDRs={10.0.0.10/32}",
		"--set", "imagepatchWebhook.networkPolicy.nodeCIDRs={10.1.0.0/16}",
		"--show-only", "templates/imagepatch-webhook.yaml", "--show-only", "templates/imagepatch-webhook-networkpolicy.yaml")
	if !strings.Contains(string(rendered), "\nkind: NetworkPolicy\n") {
		t.Fatalf("no NetworkPolicy rendered:\n%s", rendered)
	}
	kubectl(string(rendered), "apply", "--dry-run=server", "--validate=strict", "-f", "-")
	certManagerObjects(t, kubectl, reg.Host)

	// The webhook down: pods are created unchanged.
	webhook.Stop()
	kubectl(podSpec("down", ref("ubuntu:20.04"), ""), "create", "-f", "-")
	if got := getPod("ml", "down", "{.spec.containers[0].image}"); got != ref("ubuntu:20.04") {
		t.Fatalf("with the webhook down the pod runs %s, want it unchanged", got)
	}
	kubectl("", "delete", "mutatingwebhookconfiguration", "oomguard-imagepatch")

	selfSigned(ctx, t, cp, bin, reg.Host, podSpec("ca", ref("ubuntu:20.04"), ""), podImage)
}

// selfSigned: the webhook's own CA, as the chart deploys it (its RBAC,
// rendered), through the API server. Two replicas share one Secret owned by
// the webhook configuration, whose caBundle they fill; pods are patched
// through the API server; the serving certificate is renewed in the last
// third of its life and the API server goes on trusting it; deleting the
// configuration (helm uninstall) takes the Secret.
func selfSigned(ctx context.Context, t *testing.T, cp *controlplane.Cluster, bin, registry, pod, want string) {
	const cfgName, ns, secret = "oomguard-imagepatch-webhook", "oomguard", "oomguard-imagepatch-webhook-tls"
	kubectl := cp.KubectlFor(ctx, t)
	rendered := testbin.Chart(t, ns, "--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={"+registry+"/base/*}",
		"--show-only", "templates/imagepatch-webhook.yaml")
	var rbac []string
	for _, doc := range strings.Split(string(rendered), "\n---") {
		for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} {
			if strings.Contains(doc, "\nkind: "+kind+"\n") {
				rbac = append(rbac, doc)
			}
		}
	}
	if len(rbac) != 5 {
		t.Fatalf("the chart's webhook has %d RBAC objects, want 5:\n%s", len(rbac), rendered)
	}
	kubectl(webhooktest.Namespace(ns, false)+"---\n"+strings.Join(rbac, "\n---\n"), "apply", "-f", "-")
	token, ca, err := cp.ServiceAccountFiles(ctx, ns, cfgName, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The chart makes the configuration with the Deployment; a replica
	// serves only once the configuration has its CA.
	placeholder := &webhooktest.Webhook{URL: "https://127.0.0.1:1/mutate"}
	kubectl(placeholder.Config(cfgName), "apply", "-f", "-")
	var replicas []*webhooktest.Webhook
	for range 2 {
		w, err := webhooktest.StartSelfSigned(bin, "--tls-secret", ns+"/"+secret, "--webhook-configuration", cfgName,
			"--cert-validity", "30s", "--api-server", fmt.Sprintf("https://127.0.0.1:%d", cp.Port), "--api-token-file", token, "--api-ca-file", ca,
			"--insecure", "--images", registry+"/base/*", "--skip-namespaces", ns)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			w.Stop()
			if t.Failed() {
				t.Logf("self-signed webhook on %d:\n%s", w.Port, w.Log())
			}
		}()
		replicas = append(replicas, w)
	}
	kubectl(replicas[0].Config(cfgName), "apply", "-f", "-")

	// One Secret, owned by the configuration; its CA in the caBundle;
	// both replicas serve a certificate that bundle verifies.
	var bundle []byte
	waitFor(t, "the CA bundle in the webhook configuration", func() bool {
		out, err := cp.Kubectl(ctx, nil, "get", "mutatingwebhookconfiguration", cfgName, "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
		sec, err2 := cp.Kubectl(ctx, nil, "-n", ns, "get", "secret", secret, "-o", `jsonpath={.data.ca\.crt}`)
		bundle, _ = base64.StdEncoding.DecodeString(strings.TrimSpace(string(out)))
		return err == nil && err2 == nil && len(bundle) > 0 && strings.TrimSpace(string(out)) == strings.TrimSpace(string(sec))
	})
	if got := kubectl("", "-n", ns, "get", "secret", secret, "-o", "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}"); got != "MutatingWebhookConfiguration/"+cfgName {
		t.Fatalf("the Secret's owner: %s", got)
	}
	served := func(w *webhooktest.Webhook) *x509.Certificate {
		t.Helper()
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(bundle)
		c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", w.Port), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("replica on %d: the bundle does not verify what it serves: %v", w.Port, err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0]
	}
	first := served(replicas[0])
	if second := served(replicas[1]); second.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("the replicas serve different certificates: %x, %x", first.SerialNumber, second.SerialNumber)
	}
	created := 0
	admitted := func() string { // not a dry run: that answers from the cache only, and these replicas' is empty
		created++
		return kubectl(strings.Replace(pod, `"name":"ca"`, fmt.Sprintf(`"name":"ca-%d"`, created), 1), "create", "-f", "-", "-o", "jsonpath={.spec.containers[0].image}")
	}
	if got := admitted(); got != want {
		t.Fatalf("through the API server with the webhook's own CA the pod runs %s, want %s\n%s", got, want, cp.Logs(20))
	}

	// Renewed in the last third of its life, trusted without a pause.
	var renewed *x509.Certificate
	waitFor(t, "a renewed serving certificate", func() bool {
		if got := admitted(); got != want {
			t.Fatalf("while renewing, the pod runs %s, want %s", got, want)
		}
		out := kubectl("", "get", "mutatingwebhookconfiguration", cfgName, "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
		bundle, _ = base64.StdEncoding.DecodeString(out)
		renewed = served(replicas[0])
		return renewed.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	if !renewed.NotAfter.After(first.NotAfter) {
		t.Fatalf("the renewed certificate expires at %s, the first at %s", renewed.NotAfter, first.NotAfter)
	}
	if got := admitted(); got != want {
		t.Fatalf("after renewal the pod runs %s, want %s", got, want)
	}
	if !strings.Contains(replicas[0].Log()+replicas[1].Log(), "renewed the webhook's certificates") {
		t.Fatal("no replica logged its renewal")
	}

	// helm uninstall deletes the configuration: the Secret goes with it.
	kubectl("", "delete", "mutatingwebhookconfiguration", cfgName)
	waitFor(t, "the Secret's garbage collection", func() bool {
		out, err := cp.Kubectl(ctx, nil, "-n", ns, "get", "secret", secret, "--ignore-not-found", "-o", "name")
		return err == nil && len(out) == 0
	})
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ml}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: main, image: %s}]
`

// patchOf is the JSON Patch w answers body with.
func patchOf(t *testing.T, w *webhooktest.Webhook, body []byte) string {
	b, err := w.Review(context.Background(), body)
	var rv review
	if err == nil {
		err = json.Unmarshal(b, &rv)
	}
	if err != nil || rv.Response == nil {
		t.Errorf("review: %v %s", err, b)
		return ""
	}
	return string(rv.Response.Patch)
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2m for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// certManagerVersion is the cert-manager whose CRDs the chart's
// tls.certManager objects are validated against.
const certManagerVersion = "v1.21.2"

// certManagerObjects: with tls.certManager=true, the chart's Issuers and
// Certificates as the API server validates them against cert-manager's own
// CRDs (from its module on the Go module proxy; its controller and
// cainjector are modules of their own the proxy does not serve, so they
// are not run), strictly; the Certificate names the Service and writes the
// Secret the Deployment mounts, and the webhook configuration asks
// cainjector for that Certificate's CA.
func certManagerObjects(t *testing.T, kubectl func(string, ...string) string, registry string) {
	t.Helper()
	dl := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/cert-manager@"+certManagerVersion)
	dl.Dir = t.TempDir()
	dl.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := dl.Output()
	var mod struct{ Dir, Error string }
	if err != nil || json.Unmarshal(out, &mod) != nil || mod.Dir == "" {
		t.Fatalf("cert-manager %s from the Go module proxy: %v %s", certManagerVersion, err, mod.Error)
	}
	var crds []string
	for _, kind := range []string{"issuers", "clusterissuers", "certificates", "certificaterequests"} {
		b, err := os.ReadFile(filepath.Join(mod.Dir, "deploy", "crds", "cert-manager.io_"+kind+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, string(b))
	}
	kubectl(strings.Join(crds, "\n---\n"), "apply", "-f", "-")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if strings.Contains(kubectl("", "api-resources", "--api-group", "cert-manager.io", "-o", "name"), "certificates.cert-manager.io") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cert-manager's CRDs not served")
		}
	}
	rendered := testbin.Chart(t, "kube-system",
		"--set", "imagepatchWebhook.enabled=true", "--set", "imagepatchWebhook.images={"+registry+"/base/*}", "--set", "imagepatchWebhook.tls.certManager=true",
		"--api-versions", "cert-manager.io/v1/Issuer", "--api-versions", "cert-manager.io/v1/Certificate", "--show-only", "templates/imagepatch-webhook.yaml")
	kubectl(string(rendered), "apply", "--dry-run=server", "--validate=strict", "-f", "-")
	const name = "oomguard-imagepatch-webhook"
	for _, want := range []string{"secretName: " + name + "-tls", "dnsNames: [" + name + ".kube-system.svc,", "cert-manager.io/inject-ca-from: kube-system/" + name,
		"secret: {secretName: " + name + "-tls}", "isCA: true"} {
		if !strings.Contains(string(rendered), want) {
			t.Errorf("the chart's cert-manager objects lack %q", want)
		}
	}
}
