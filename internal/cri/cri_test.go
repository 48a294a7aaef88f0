package cri

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func bytesField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func container(id string, labels map[string]string) []byte {
	c := bytesField(nil, 1, []byte(id))
	c = protowire.AppendVarint(protowire.AppendTag(c, 7, protowire.VarintType), 12345) // created_at, skipped
	for k, v := range labels {
		c = bytesField(c, 8, bytesField(bytesField(nil, 1, []byte(k)), 2, []byte(v)))
	}
	return c
}

// A gRPC answer as containerd's grpc-go writes it, over HTTP/2 on a unix
// socket: the fake is for the wire format; the VM and the host's containerd
// are the proof.
func TestNames(t *testing.T) {
	root := t.TempDir()
	sock := filepath.Join(root, "run/containerd/containerd.sock")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var msg []byte
	msg = bytesField(msg, 1, container("abc123", map[string]string{"io.kubernetes.pod.namespace": "ml", "io.kubernetes.pod.name": "vm-0", "io.kubernetes.container.name": "main"}))
	msg = bytesField(msg, 1, container("sandboxless", nil))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/runtime.v1.RuntimeService/ListContainers" || r.Header.Get("Content-Type") != "application/grpc" {
			w.Header().Set("Grpc-Status", "12")
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
		w.Write(append(frame, msg...))
		w.Header().Set("Grpc-Status", "0")
	})}
	go srv.Serve(l)
	defer srv.Close()
	ep := Find(root, "")
	if ep != "unix:///run/containerd/containerd.sock" {
		t.Fatalf("found %q", ep)
	}
	names, err := Names(context.Background(), root, ep)
	if err != nil || len(names) != 1 || names["abc123"].String() != "ml/vm-0/main" {
		t.Fatalf("%v %v", names, err)
	}
	if _, err := Names(context.Background(), root, "unix:///run/crio/crio.sock"); err == nil {
		t.Fatal("no runtime there must be an error")
	}
	if _, err := Names(context.Background(), root, "tcp://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "unix://") {
		t.Fatalf("tcp endpoint: %v", err)
	}
}

func FuzzDecodeList(f *testing.F) {
	f.Add(bytesField(nil, 1, container("x", map[string]string{"io.kubernetes.pod.name": "p"})))
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeList(b) // never panics, whatever a runtime answers
	})
}
