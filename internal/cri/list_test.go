package cri

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func varintField(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func mapEntry(b []byte, num protowire.Number, k, v string) []byte {
	return bytesField(b, num, bytesField(bytesField(nil, 1, []byte(k)), 2, []byte(v)))
}

// A runtime's CRI over a unix socket, answering ListPodSandbox,
// ListContainers and ContainerStatus as grpc-go writes them: the fake is
// for the wire format; the host's containerd and the VM's runtimes are the
// proof.
func serveCRI(t *testing.T, answers map[string]func(req []byte) ([]byte, string)) string {
	t.Helper()
	root := t.TempDir()
	sock := filepath.Join(root, "run/crio/crio.sock")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := answers[filepath.Base(r.URL.Path)]
		if f == nil {
			w.Header().Set("Grpc-Status", "12")
			return
		}
		var req [1 << 10]byte
		n, _ := r.Body.Read(req[:])
		msg, status := f(req[5:n])
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		if status == "0" {
			w.Write(append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...))
		}
		w.Header().Set("Grpc-Status", status)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return root
}

func TestListAndStatus(t *testing.T) {
	pod := bytesField(nil, 1, []byte("sb1"))
	pod = bytesField(pod, 2, bytesField(bytesField(bytesField(nil, 1, []byte("vm-0")), 2, []byte("uid-1")), 3, []byte("ml")))
	pod = mapEntry(pod, 5, "app", "vm")
	pod = mapEntry(pod, 6, "oom-score-adj.oomguard.io", "900")
	pod = bytesField(pod, 7, []byte("kata"))
	gone := varintField(bytesField(nil, 1, []byte("sb2")), 3, 1) // SANDBOX_NOTREADY
	ctr := bytesField(nil, 1, []byte("c1"))
	ctr = bytesField(ctr, 2, []byte("sb1"))
	ctr = bytesField(ctr, 3, bytesField(nil, 1, []byte("main")))
	ctr = bytesField(ctr, 4, bytesField(nil, 1, []byte("registry.example/vm:1")))
	ctr = varintField(ctr, 6, 1) // CONTAINER_RUNNING
	ctr = mapEntry(ctr, 8, "io.kubernetes.pod.name", "vm-0")
	created := bytesField(bytesField(nil, 1, []byte("c2")), 2, []byte("sb1")) // CONTAINER_CREATED, 0, left out
	info := `{"pid":4242,"runtimeSpec":{"ociVersion":"1.2.0","process":{"args":["/sbin/init"],"oomScoreAdj":-997,"cwd":"/"},` +
		`"annotations":{"io.kubernetes.cri.container-name":"main"},"linux":{"cgroupsPath":"kubepods-pod1.slice:cri-containerd:c1","resources":{"unified":{"memory.oom.group":"1"}}}}}`
	root := serveCRI(t, map[string]func([]byte) ([]byte, string){
		"ListPodSandbox": func([]byte) ([]byte, string) { return bytesField(bytesField(nil, 1, pod), 1, gone), "0" },
		"ListContainers": func([]byte) ([]byte, string) { return bytesField(bytesField(nil, 1, ctr), 1, created), "0" },
		"ContainerStatus": func(req []byte) ([]byte, string) {
			var id string
			verbose := false
			walk(req, func(num protowire.Number, v []byte, x uint64) error {
				if num == 1 {
					id = string(v)
				} else if num == 2 {
					verbose = x == 1
				}
				return nil
			})
			if id != "c1" {
				return nil, "5"
			}
			if !verbose {
				return nil, "3"
			}
			return mapEntry(bytesField(nil, 1, nil), 2, "info", info), "0"
		},
	})
	ep := Find(root, "")
	c, err := Dial(root, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	pods, err := c.Sandboxes(ctx)
	if err != nil || len(pods) != 2 {
		t.Fatalf("%+v %v", pods, err)
	}
	if p := pods[0]; p.ID != "sb1" || p.Name != "vm-0" || p.UID != "uid-1" || p.Namespace != "ml" || !p.Ready || p.RuntimeHandler != "kata" ||
		p.Labels["app"] != "vm" || p.Annotations["oom-score-adj.oomguard.io"] != "900" {
		t.Errorf("pod %+v", p)
	}
	if pods[1].Ready {
		t.Errorf("a pod SANDBOX_NOTREADY read as ready: %+v", pods[1])
	}
	ctrs, err := c.Containers(ctx)
	if err != nil || len(ctrs) != 2 {
		t.Fatalf("%+v %v", ctrs, err)
	}
	if x := ctrs[0]; x.ID != "c1" || x.SandboxID != "sb1" || x.Name != "main" || x.Image != "registry.example/vm:1" || x.State != Running || x.Labels["io.kubernetes.pod.name"] != "vm-0" {
		t.Errorf("container %+v", x)
	}
	if ctrs[1].State != Created {
		t.Errorf("a state left out is CONTAINER_CREATED: %+v", ctrs[1])
	}
	st, err := c.Status(ctx, "c1")
	if err != nil || st.Pid != 4242 || st.Spec == nil || st.Spec.Process.Args[0] != "/sbin/init" || *st.Spec.Process.OOMScoreAdj != -997 ||
		st.Spec.Linux.Resources.Unified["memory.oom.group"] != "1" || st.Spec.Annotations["io.kubernetes.cri.container-name"] != "main" {
		t.Fatalf("status %+v %v", st, err)
	}
	if _, err := c.Status(ctx, "c2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a container the runtime does not have: %v", err)
	}
}

// A runtime whose verbose status is not JSON, or holds none: an error, or
// no spec, never a guess.
func TestStatusWithoutSpec(t *testing.T) {
	for name, tc := range map[string]struct {
		info    string
		wantErr bool
	}{"no info": {"", false}, "not JSON": {"{pid", true}, "no spec": {`{"pid":1}`, false}} {
		msg := bytesField(nil, 1, nil)
		if tc.info != "" {
			msg = mapEntry(msg, 2, "info", tc.info)
		}
		st, err := decodeStatus(msg)
		if (err != nil) != tc.wantErr || st.Spec != nil {
			t.Errorf("%s: %+v %v", name, st, err)
		}
	}
}

func FuzzDecodeRuntime(f *testing.F) {
	f.Add(bytesField(nil, 1, mapEntry(bytesField(nil, 1, []byte("x")), 5, "k", "v")))
	f.Add(mapEntry(nil, 2, "info", `{"pid":1,"runtimeSpec":{"process":{"args":["a"]}}}`))
	f.Add([]byte{0x0a, 0x02, 0x30, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Never panics, whatever a runtime answers.
		decodeSandboxes(b)
		decodeContainers(b)
		decodeStatus(b)
	})
}
