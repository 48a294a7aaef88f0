// Package cri asks a CRI runtime (containerd, CRI-O) over its socket
// which pods and containers it runs, and what a container was started
// with: the unary calls ListPodSandbox, ListContainers and ContainerStatus,
// spoken with the standard library's HTTP/2 and protowire, so the doctor
// and the plugin stay small.
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
	c, err := Dial(root, endpoint)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	b, err := c.call(ctx, "ListContainers", nil, maxResponse)
	if err != nil {
		return nil, fmt.Errorf("list containers at %s: %w", endpoint, err)
	}
	return decodeList(b)
}

// Client speaks to one runtime's CRI socket.
type Client struct {
	endpoint string
	http     *http.Client
}

// Dial makes a client of the runtime at endpoint (unix://PATH, PATH taken
// below root); it connects on each call.
func Dial(root, endpoint string) (*Client, error) {
	sock, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return nil, fmt.Errorf("runtime endpoint %q: want unix:///PATH", endpoint)
	}
	sock = filepath.Join(root, sock)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &Client{endpoint: endpoint, http: &http.Client{Transport: &http.Transport{
		Protocols: &protos,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}, Timeout: 10 * time.Second}}, nil
}

// Endpoint is where the client calls.
func (c *Client) Endpoint() string { return c.endpoint }

// Close lets the client's connection go.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// ErrNotFound is a runtime's answer for a container it does not have (any more).
var ErrNotFound = errors.New("not found")

// call makes one unary call of runtime.v1.RuntimeService with the request
// message req, and returns the answer's message, at most limit bytes.
func (c *Client) call(ctx context.Context, method string, req []byte, limit int) ([]byte, error) {
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req)))
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/runtime.v1.RuntimeService/"+method, bytes.NewReader(append(frame, req...)))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/grpc")
	r.Header.Set("TE", "trailers")
	resp, err := c.http.Do(r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+6))
	if err != nil {
		return nil, err
	}
	status := resp.Trailer.Get("Grpc-Status")
	if status == "" {
		status = resp.Header.Get("Grpc-Status") // a trailers-only answer
	}
	if status == "5" { // NOT_FOUND
		return nil, ErrNotFound
	}
	if resp.StatusCode != http.StatusOK || status != "0" {
		return nil, fmt.Errorf("HTTP %d, grpc-status %q: %q", resp.StatusCode, status,
			resp.Trailer.Get("Grpc-Message")+resp.Header.Get("Grpc-Message"))
	}
	if len(body) > limit+5 {
		return nil, fmt.Errorf("the answer is over %d bytes", limit)
	}
	if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		return nil, errors.New("not one uncompressed gRPC message")
	}
	return body[5:], nil
}

// decodeList reads a ListContainersResponse: repeated Container containers = 1.
func decodeList(b []byte) (map[string]Name, error) {
	out := map[string]Name{}
	err := walk(b, func(num protowire.Number, v []byte, _ uint64) error {
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
	err := walk(b, func(num protowire.Number, v []byte, _ uint64) error {
		switch num {
		case 1:
			id = string(v)
		case 8:
			var key, value string
			if err := walk(v, func(num protowire.Number, v []byte, _ uint64) error {
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
