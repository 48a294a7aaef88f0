// Package cri asks a CRI runtime (containerd, CRI-O) which pod and container
// each container ID is, over its socket: one gRPC call, ListContainers,
// spoken with the standard library's HTTP/2 and protowire, so the doctor
// stays small.
package cri

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Endpoints are the sockets crictl tries when none is given.
var Endpoints = []string{"unix:///run/containerd/containerd.sock", "unix:///run/crio/crio.sock", "unix:///var/run/cri-dockerd.sock"}

// Name is what kubelet's labels say a container is.
type Name struct {
	Namespace, Pod, Container string
}

func (n Name) String() string { return n.Namespace + "/" + n.Pod + "/" + n.Container }

// maxResponse bounds what a runtime may answer: a node's containers fit.
const maxResponse = 64 << 20

// Find is the first of Endpoints whose socket exists below root, or endpoint
// itself when given; "" when there is none.
func Find(root, endpoint string) string {
	if endpoint != "" {
		return endpoint
	}
	for _, e := range Endpoints {
		if st, err := os.Stat(filepath.Join(root, strings.TrimPrefix(e, "unix://"))); err == nil && st.Mode()&os.ModeSocket != 0 {
			return e
		}
	}
	return ""
}

// Names lists the runtime's containers at endpoint (unix://PATH, PATH taken
// below root) and returns each one's name by its ID.
func Names(ctx context.Context, root, endpoint string) (map[string]Name, error) {
	sock, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return nil, fmt.Errorf("runtime endpoint %q: want unix:///PATH", endpoint)
	}
	sock = filepath.Join(root, sock)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{
		Protocols: &protos,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	// An empty ListContainersRequest: gRPC's 5-byte frame around no bytes.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/runtime.v1.RuntimeService/ListContainers", bytes.NewReader(make([]byte, 5)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list containers at %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("list containers at %s: %w", endpoint, err)
	}
	status := resp.Trailer.Get("Grpc-Status")
	if status == "" {
		status = resp.Header.Get("Grpc-Status") // a trailers-only answer
	}
	if resp.StatusCode != http.StatusOK || status != "0" {
		return nil, fmt.Errorf("list containers at %s: HTTP %d, grpc-status %q: %q", endpoint, resp.StatusCode, status,
			resp.Trailer.Get("Grpc-Message")+resp.Header.Get("Grpc-Message"))
	}
	if len(body) > maxResponse {
		return nil, fmt.Errorf("list containers at %s: the answer is over %d bytes", endpoint, maxResponse)
	}
	if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		return nil, fmt.Errorf("list containers at %s: not one uncompressed gRPC message", endpoint)
	}
	return decodeList(body[5:])
}

// decodeList reads a ListContainersResponse: repeated Container containers = 1.
func decodeList(b []byte) (map[string]Name, error) {
	out := map[string]Name{}
	err := fields(b, func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		id, name, err := decodeContainer(v)
		if err != nil {
			return err
		}
		if id != "" && name.Pod != "" {
			out[id] = name
		}
		return nil
	})
	return out, err
}

// decodeContainer reads a Container's id = 1 and labels = 8, where kubelet
// names the pod, its namespace and the container.
func decodeContainer(b []byte) (string, Name, error) {
	var id string
	var n Name
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			id = string(v)
		case 8:
			var key, value string
			if err := fields(v, func(num protowire.Number, v []byte) error {
				if num == 1 {
					key = string(v)
				} else if num == 2 {
					value = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			switch key {
			case "io.kubernetes.pod.namespace":
				n.Namespace = value
			case "io.kubernetes.pod.name":
				n.Pod = value
			case "io.kubernetes.container.name":
				n.Container = value
			}
		}
		return nil
	})
	return id, n, err
}

// fields calls f with each length-delimited field of message b, skipping
// the others.
func fields(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("malformed CRI answer: bad tag")
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errors.New("malformed CRI answer: bad length")
			}
			if err := f(num, v); err != nil {
				return err
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return errors.New("malformed CRI answer: bad field")
		}
		b = b[m:]
	}
	return nil
}
