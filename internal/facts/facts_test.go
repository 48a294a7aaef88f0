package facts

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// kubelet creates containers by image ID; the name is what rules on images match.
func TestImage(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, runtime string
		ann           map[string]string
		want          string
	}{
		{"containerd", RuntimeContainerd, map[string]string{containerdImage: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"cri-o by name", RuntimeCRIO, map[string]string{crioImage: "registry.example/vm:1", crioImageName: "registry.example/other:2"}, "registry.example/vm:1"},
		{"cri-o by id", RuntimeCRIO, map[string]string{crioImage: id, crioImageName: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"cri-o by sha256 id", RuntimeCRIO, map[string]string{crioImage: "sha256:" + id, crioImageName: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"cri-o id only", RuntimeCRIO, map[string]string{crioImage: id}, id},
		{"cri-o name only", RuntimeCRIO, map[string]string{crioImageName: "registry.example/vm:1"}, "registry.example/vm:1"},
		{"unknown runtime", RuntimeUnknown, map[string]string{containerdImage: "x", crioImage: "y"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Image(tc.runtime, tc.ann); got != tc.want {
				t.Fatalf("Image = %q, want %q", got, tc.want)
			}
		})
	}
}

// CRI-O writes a pod's runtime handler only into its sandbox's spec, beside
// the container's bundle; what the container's spec names is read only in
// CRI-O's forms, and only a sandbox's own spec answers.
func TestCRIOHandler(t *testing.T) {
	const (
		ctr = "1111111111111111111111111111111111111111111111111111111111111111"
		sb  = "2222222222222222222222222222222222222222222222222222222222222222"
	)
	dir := "/run/containers/storage/overlay-containers"
	bundle := dir + "/" + ctr + "/userdata"
	sandboxSpec := func(typ, id, handler string) string {
		return `{"annotations":{"` + crioMark + `":"` + typ + `","` + crioSandboxID + `":"` + id + `","` + crioRuntimeHandler + `":"` + handler + `"}}`
	}
	for _, tc := range []struct {
		name, bundle, id string
		spec             string // the sandbox's config.json; "" for none
		symlink          bool
		want             string
		wantErr          bool
	}{
		{name: "sysbox", bundle: bundle, id: sb, spec: sandboxSpec("sandbox", sb, "sysbox-runc"), want: "sysbox-runc"},
		{name: "default handler", bundle: bundle, id: sb, spec: sandboxSpec("sandbox", sb, ""), want: ""},
		{name: "no sandbox id", bundle: bundle},
		{name: "id not hex", bundle: bundle, id: "../../../../etc", wantErr: true},
		{name: "id of another length", bundle: bundle, id: sb[:40], wantErr: true},
		{name: "bundle not CRI-O's", bundle: "/tmp/x/" + ctr + "/userdata", id: sb, spec: sandboxSpec("sandbox", sb, "sysbox-runc"), wantErr: true},
		{name: "no sandbox spec", bundle: bundle, id: sb, wantErr: true},
		{name: "a container's spec there", bundle: bundle, id: sb, spec: sandboxSpec("container", sb, "sysbox-runc"), wantErr: true},
		{name: "another sandbox's spec there", bundle: bundle, id: sb, spec: sandboxSpec("sandbox", ctr, "sysbox-runc"), wantErr: true},
		{name: "not JSON", bundle: bundle, id: sb, spec: "{", wantErr: true},
		{name: "too large", bundle: bundle, id: sb, spec: `{"x":"` + strings.Repeat("a", maxSandboxSpec) + `"}`, wantErr: true},
		{name: "a FIFO", bundle: bundle, id: sb, spec: "fifo", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.spec != "" {
				p := filepath.Join(root, dir, sb, "userdata", "config.json")
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				var err error
				if tc.spec == "fifo" {
					err = syscall.Mkfifo(p, 0o644)
				} else {
					err = os.WriteFile(p, []byte(tc.spec), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			ann := map[string]string{}
			if tc.id != "" {
				ann[crioSandboxID] = tc.id
			}
			got, err := crioHandler(root, tc.bundle, ann)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("crioHandler = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
