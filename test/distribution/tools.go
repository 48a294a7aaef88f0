//go:build tools

// Package distribution pins the registry-side tools of the image tests:
// distribution v3's registry (the CNCF registry's current major version,
// beside Debian's 2.8), go-containerregistry's crane (what a user scripts
// the same patch with, to compare against), and cmd/htpasswd, which writes
// the bcrypt htpasswd files distribution's basic auth reads. make
// components builds them.
package distribution

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
	_ "github.com/google/go-containerregistry/cmd/crane"
)
