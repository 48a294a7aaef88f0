package release

import (
	"bytes"
	"encoding/pem"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// RootsPath is where the image keeps its trusted roots: the path Go's
// crypto/x509 (and OpenSSL on Debian) reads first.
const RootsPath = "etc/ssl/certs/ca-certificates.crt"

// Roots is the image's root bundle in PEM: Mozilla's roots as the module
// golang.org/x/crypto/x509roots/fallback carries them at the version go.mod
// pins (updated as any dependency is). A root Mozilla distrusts after a date
// is left out: a PEM bundle cannot say the date.
func Roots() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}
