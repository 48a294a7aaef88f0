//go:build tools

// The runc shim is built from the same module (make components).
package tools

import _ "github.com/containerd/containerd/cmd/containerd-shim-runc-v2"
