package hook

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/internal/facts"
)

// The OCI state on stdin and the bundle's config.json are the runtime's, but
// shaped by the pod: any bytes are read or refused, and the identity they
// give is only ever the runtime's own.
func FuzzOCIInput(f *testing.F) {
	f.Add([]byte(`{"ociVersion":"1.0.2","id":"c","pid":1,"bundle":"BUNDLE","annotations":{"io.kubernetes.cri.sandbox-namespace":"kube-system"}}`),
		[]byte(`{"process":{"args":["/sbin/init"],"oomScoreAdj":-997},"annotations":{"io.kubernetes.cri-o.ContainerType":"container","io.kubernetes.cri-o.Labels":"{\"io.kubernetes.pod.namespace\":\"ml\"}"},"linux":{"cgroupsPath":"a:b:c","resources":{"unified":{"memory.oom.group":"1"}}}}`))
	f.Add([]byte(`{"pid":7,"bundle":"BUNDLE"}`), []byte(`{"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-namespace":"ml"}}`))
	f.Add([]byte(`{"pid":7,"bundle":"BUNDLE"}`), []byte(`{"annotations":{"io.kubernetes.cri-o.Labels":"[1]","io.kubernetes.cri-o.ContainerType":"x","io.kubernetes.cri-o.Annotations":"{"}}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, state, spec []byte) {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o644); err != nil {
			t.Fatal(err)
		}
		st, sp, err := readInput(bytes.NewReader(bytes.ReplaceAll(state, []byte("BUNDLE"), []byte(dir))))
		if err != nil {
			return
		}
		fc, _ := facts.FromOCI(t.TempDir(), st, sp)
		ann := map[string]string{}
		for k, v := range sp.Annotations {
			ann[k] = v
		}
		for k, v := range st.Annotations {
			ann[k] = v
		}
		switch fc.Runtime {
		case facts.RuntimeUnknown:
			if fc.Namespace != "" || fc.Pod != "" || fc.Container != "" || fc.Image != "" {
				t.Fatalf("identity from a spec no runtime is known to have written: %+v", fc)
			}
		case facts.RuntimeCRIO:
			if fc.Namespace != "" && !strings.Contains(ann["io.kubernetes.cri-o.Labels"], fc.Namespace) {
				t.Fatalf("CRI-O namespace %q not from CRI-O's labels %q", fc.Namespace, ann["io.kubernetes.cri-o.Labels"])
			}
		case facts.RuntimeContainerd:
			if fc.Namespace != ann["io.kubernetes.cri.sandbox-namespace"] {
				t.Fatalf("containerd namespace %q", fc.Namespace)
			}
		}
	})
}
