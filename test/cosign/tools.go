//go:build tools

// Package cosign pins the real cosign the image tests sign with and verify
// with (sigstore's own CLI, from its Go module); make components builds it.
package cosign

import (
	_ "github.com/sigstore/cosign/v3/cmd/cosign"
)
