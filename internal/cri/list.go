package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/encoding/protowire"
)

// State is a container's state as CRI says it.
type State int

// CRI's ContainerState.
const (
	Created State = iota
	Running
	Exited
	Unknown
)

// Sandbox is a pod as ListPodSandbox tells of it.
type Sandbox struct {
	ID, Name, UID, Namespace, RuntimeHandler string
	Ready                                    bool
	Labels, Annotations                      map[string]string
}

// Container is a container as ListContainers tells of it.
type Container struct {
	ID, SandboxID, Name, Image string
	State                      State
	Labels, Annotations        map[string]string
}

// Status is what ContainerStatus's verbose information says the runtime
// started a container with; Spec is nil when the runtime did not say.
type Status struct {
	Pid  uint32
	Spec *rspec.Spec
}

// maxStatus bounds one container's status: its spec, environment and all.
const maxStatus = 4 << 20

// Sandboxes lists the runtime's pods.
func (c *Client) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	b, err := c.call(ctx, "ListPodSandbox", nil, maxResponse)
	if err != nil {
		return nil, fmt.Errorf("list pods at %s: %w", c.endpoint, err)
	}
	return decodeSandboxes(b)
}

// Containers lists the runtime's containers.
func (c *Client) Containers(ctx context.Context) ([]Container, error) {
	b, err := c.call(ctx, "ListContainers", nil, maxResponse)
	if err != nil {
		return nil, fmt.Errorf("list containers at %s: %w", c.endpoint, err)
	}
	return decodeContainers(b)
}

// Status asks the runtime for the container's pid and OCI spec (verbose
// ContainerStatus: containerd and CRI-O put both in info["info"]).
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	req := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), id)
	req = protowire.AppendVarint(protowire.AppendTag(req, 2, protowire.VarintType), 1)
	b, err := c.call(ctx, "ContainerStatus", req, maxStatus)
	if err != nil {
		return Status{}, fmt.Errorf("status of container %s at %s: %w", id, c.endpoint, err)
	}
	return decodeStatus(b)
}

func decodeSandboxes(b []byte) ([]Sandbox, error) {
	var out []Sandbox
	err := walk(b, func(num protowire.Number, v []byte, _ uint64) error {
		if num != 1 || v == nil {
			return nil
		}
		s := Sandbox{Ready: true} // SANDBOX_READY is 0, which the wire leaves out
		err := walk(v, func(num protowire.Number, v []byte, x uint64) error {
			switch num {
			case 1:
				s.ID = string(v)
			case 2:
				return walk(v, func(num protowire.Number, v []byte, _ uint64) error {
					switch num {
					case 1:
						s.Name = string(v)
					case 2:
						s.UID = string(v)
					case 3:
						s.Namespace = string(v)
					}
					return nil
				})
			case 3:
				s.Ready = x == 0
			case 5:
				return entry(&s.Labels, v)
			case 6:
				return entry(&s.Annotations, v)
			case 7:
				s.RuntimeHandler = string(v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

func decodeContainers(b []byte) ([]Container, error) {
	var out []Container
	err := walk(b, func(num protowire.Number, v []byte, _ uint64) error {
		if num != 1 || v == nil {
			return nil
		}
		var c Container
		err := walk(v, func(num protowire.Number, v []byte, x uint64) error {
			switch num {
			case 1:
				c.ID = string(v)
			case 2:
				c.SandboxID = string(v)
			case 3:
				return walk(v, func(num protowire.Number, v []byte, _ uint64) error {
					if num == 1 {
						c.Name = string(v)
					}
					return nil
				})
			case 4:
				return walk(v, func(num protowire.Number, v []byte, _ uint64) error {
					if num == 1 {
						c.Image = string(v)
					}
					return nil
				})
			case 6:
				c.State = State(min(x, uint64(Unknown)))
			case 8:
				return entry(&c.Labels, v)
			case 9:
				return entry(&c.Annotations, v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// decodeStatus reads a ContainerStatusResponse's info map = 2, whose "info"
// is the runtime's JSON.
func decodeStatus(b []byte) (Status, error) {
	var info map[string]string
	if err := walk(b, func(num protowire.Number, v []byte, _ uint64) error {
		if num == 2 {
			return entry(&info, v)
		}
		return nil
	}); err != nil {
		return Status{}, err
	}
	var st struct {
		Pid  uint32      `json:"pid"`
		Spec *rspec.Spec `json:"runtimeSpec"`
	}
	if j := info["info"]; j != "" {
		if err := json.Unmarshal([]byte(j), &st); err != nil {
			return Status{}, fmt.Errorf("the runtime's verbose status is not the JSON containerd and CRI-O write: %w", err)
		}
	}
	return Status{Pid: st.Pid, Spec: st.Spec}, nil
}

// entry adds a map field's key = 1 and value = 2 to m.
func entry(m *map[string]string, b []byte) error {
	var k, v string
	if err := walk(b, func(num protowire.Number, b []byte, _ uint64) error {
		switch num {
		case 1:
			k = string(b)
		case 2:
			v = string(b)
		}
		return nil
	}); err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
	return nil
}

// walk calls f with each field of message b: v for a length-delimited one
// (non-nil), x for a varint; other kinds are skipped.
func walk(b []byte, f func(num protowire.Number, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("malformed CRI answer: bad tag")
		}
		b = b[n:]
		var err error
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errors.New("malformed CRI answer: bad length")
			}
			err, n = f(num, v[:len(v):len(v)], 0), m
		case protowire.VarintType:
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return errors.New("malformed CRI answer: bad varint")
			}
			err, n = f(num, nil, x), m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errors.New("malformed CRI answer: bad field")
			}
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
