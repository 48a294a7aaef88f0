package imagepatch

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"
)

// cosignKey wraps der as cosign generate-key-pair does (scrypt N 2^n).
func cosignKey(t *testing.T, der []byte, password string, n int) []byte {
	t.Helper()
	salt, nonce := make([]byte, 32), make([]byte, 24)
	rand.Read(salt)
	rand.Read(nonce)
	k, err := scrypt.Key([]byte(password), salt, 1<<n, 8, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	var key [32]byte
	var nb [24]byte
	copy(key[:], k)
	copy(nb[:], nonce)
	env := map[string]any{
		"kdf":        map[string]any{"name": "scrypt", "params": map[string]int{"N": 1 << n, "r": 8, "p": 1}, "salt": salt},
		"cipher":     map[string]any{"name": "nacl/secretbox", "nonce": nonce},
		"ciphertext": secretbox.Seal(nil, der, &nb, &key),
	}
	b, _ := json.Marshal(env)
	return pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: b})
}

func pkcs8(t *testing.T, key any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestLoadSigner(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecDER := pkcs8(t, ec)
	sec1, _ := x509.MarshalECPrivateKey(ec)
	for _, tc := range []struct {
		name, password string
		pem            []byte
		err            string
	}{
		{name: "cosign's", password: "pw", pem: cosignKey(t, ecDER, "pw", 10)},
		{name: "wrong password", password: "nope", pem: cosignKey(t, ecDER, "pw", 10), err: "wrong password"},
		{name: "PKCS#8 ECDSA", pem: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})},
		{name: "SEC 1", pem: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})},
		{name: "Ed25519", pem: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(t, ed)})},
		{name: "RSA", pem: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(t, rs)})},
		{name: "a public key", pem: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}}), err: "want a private key"},
		{name: "not PEM", pem: []byte("hello"), err: "no PEM block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := LoadSigner(tc.pem, []byte(tc.password))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sig, err := s.sign([]byte("payload"))
			if err != nil || !s.verify([]byte("payload"), sig) || s.verify([]byte("other"), sig) {
				t.Fatalf("sign and verify: %v", err)
			}
		})
	}
}

// A hostile key file must not make the patcher spend minutes or gigabytes in scrypt.
func TestLoadSignerBoundsScrypt(t *testing.T) {
	blk, _ := pem.Decode(cosignKey(t, []byte("x"), "pw", 10))
	var env map[string]any
	json.Unmarshal(blk.Bytes, &env)
	env["kdf"].(map[string]any)["params"] = map[string]int{"N": 1 << 30, "r": 8, "p": 1}
	b, _ := json.Marshal(env)
	_, err := LoadSigner(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: b}), []byte("pw"))
	if err == nil || !strings.Contains(err.Error(), "N 1073741824") {
		t.Fatalf("got %v, want the parameters refused", err)
	}
}

// A result is signed once, in cosign's place and format; other
// signatures there are kept, and a re-run adds none.
func TestApplySigns(t *testing.T) {
	r := newRegistry(t)
	r.push(t, "ml/a:1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s, err := LoadSigner(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(t, ec)}), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := patcher(t, r, ShimSpec(), WithSigner(s))
	res := p.Apply(context.Background(), r.tag(t, "ml/a:1"))
	if res.Action != ActionPush || res.Signature == "" {
		t.Fatalf("apply: %+v", res)
	}
	layers := func() []string {
		t.Helper()
		d, err := remote.Get(r.tag(t, strings.TrimPrefix(res.Signature, r.host+"/")), r.opts()...)
		if err != nil {
			t.Fatal(err)
		}
		img, _ := d.Image()
		m, _ := img.Manifest()
		var out []string
		for _, l := range m.Layers {
			if l.MediaType != SignatureMediaType {
				t.Fatalf("a signature layer of %s", l.MediaType)
			}
			rc, _ := img.LayerByDigest(l.Digest)
			body, _ := rc.Compressed()
			var pl struct {
				Critical struct {
					Image struct {
						Digest string `json:"docker-manifest-digest"`
					} `json:"image"`
					Type string `json:"type"`
				} `json:"critical"`
			}
			json.NewDecoder(body).Decode(&pl)
			if pl.Critical.Image.Digest != res.Digest || pl.Critical.Type != signatureType {
				t.Fatalf("payload %+v, want %s", pl, res.Digest)
			}
			sig, _ := base64.StdEncoding.DecodeString(l.Annotations[SignatureAnnotation])
			out = append(out, string(sig))
		}
		return out
	}
	if got := layers(); len(got) != 1 {
		t.Fatalf("%d signatures", len(got))
	}
	if !strings.HasSuffix(res.Signature, ":"+strings.Replace(res.Digest, ":", "-", 1)+".sig") {
		t.Fatalf("signature at %s", res.Signature)
	}
	again := p.Apply(context.Background(), r.tag(t, "ml/a:1"))
	if again.Action != ActionUnchanged || again.Signature != res.Signature || len(layers()) != 1 {
		t.Fatalf("re-run: %+v, %d signatures", again, len(layers()))
	}
	// Another key's signature is kept beside this one.
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s2, _ := LoadSigner(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(t, other)}), nil)
	if res := patcher(t, r, ShimSpec(), WithSigner(s2)).Apply(context.Background(), r.tag(t, "ml/a:1")); res.Action != ActionUnchanged || len(layers()) != 2 {
		t.Fatalf("a second key: %+v, %d signatures", res, len(layers()))
	}
}

// The OCI lineage annotations name the base on an OCI image and index.
func TestLineageAnnotations(t *testing.T) {
	r := newRegistry(t)
	r.push(t, "ml/a:1", image(t, "amd64", types.OCIManifestSchema1, nil, []string{"/sbin/init"}))
	src, _ := remote.Head(r.tag(t, "ml/a:1"), r.opts()...)
	res := patcher(t, r, ShimSpec()).Apply(context.Background(), r.tag(t, "ml/a:1"))
	d, err := remote.Get(r.tag(t, strings.TrimPrefix(res.Destination, r.host+"/")), r.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	json.Unmarshal(d.Manifest, &m)
	if m.Annotations[AnnotationBaseDigest] != src.Digest.String() || m.Annotations[AnnotationBaseName] != r.host+"/ml/a:1" {
		t.Fatalf("annotations %v, want the base %s", m.Annotations, src.Digest)
	}
}

// A bundle is taken as the signer's only when its envelope verifies with
// the key and its statement is cosign's about that very digest: one for
// another digest, another key's, or a forged payload is not.
func TestBundleIsOwnOnlyForItsDigestAndKey(t *testing.T) {
	signer := func() *Signer {
		ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		s, err := LoadSigner(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(t, ec)}), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, other := signer(), signer()
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	b, err := s.Bundle(d)
	if err != nil {
		t.Fatal(err)
	}
	if !s.signedBundle(b, d) {
		t.Fatalf("its own bundle: not recognised\n%s", b)
	}
	forged := bytes.Replace(b, []byte(`"payload":"`), []byte(`"payload":"AA`), 1)
	for what, ok := range map[string]bool{
		"another digest": s.signedBundle(b, v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)}),
		"another key":    other.signedBundle(b, d),
		"forged payload": s.signedBundle(forged, d),
		"not JSON":       s.signedBundle([]byte("{"), d),
	} {
		if ok {
			t.Errorf("%s: taken as the signer's", what)
		}
	}
	if _, err := ParseSignatureFormat("cosign"); err == nil {
		t.Error("an unknown signature format was accepted")
	}
}
