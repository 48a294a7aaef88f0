package imagepatch

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"
)

// Signatures as cosign stores them with a key (cosign sign --key, without
// a transparency log): a "simple signing" payload naming the signed
// digest, as a layer of an image under the tag sha256-HEX.sig beside it,
// the signature in the layer's annotation. `cosign verify --key` and the
// admission policies that read cosign's signatures (sigstore's
// policy-controller, Kyverno's verifyImages) verify them. Hand-written
// over sigstore's libraries: cosign's module adds ~200 modules to the
// build, and this format is three JSON fields and one signature.
const (
	SignatureMediaType  = types.MediaType("application/vnd.dev.cosign.simplesigning.v1+json")
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	signatureType       = "cosign container image signature"
)

// Signer signs results with a private key.
type Signer struct {
	key crypto.Signer
}

// LoadSigner reads a private key in PEM: cosign's own (generate-key-pair:
// ENCRYPTED SIGSTORE PRIVATE KEY, or the older ENCRYPTED COSIGN PRIVATE
// KEY), decrypted with password, or an unencrypted PKCS#8 or SEC 1 key.
// ECDSA, Ed25519 and RSA keys sign.
func LoadSigner(pemBytes, password []byte) (*Signer, error) {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		return nil, errors.New("no PEM block: want a private key as cosign generate-key-pair writes it, or a PKCS#8 key")
	}
	der := blk.Bytes
	var key any
	var err error
	switch blk.Type {
	case "ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY":
		if der, err = decryptCosignKey(der, password); err != nil {
			return nil, err
		}
		key, err = x509.ParsePKCS8PrivateKey(der)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(der)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(der)
	default:
		return nil, fmt.Errorf("a PEM block of type %q: want a private key", blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse the private key: %w", err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey, *rsa.PrivateKey, ed25519.PrivateKey:
		return &Signer{key: k.(crypto.Signer)}, nil
	}
	return nil, fmt.Errorf("a %T key: want ECDSA, Ed25519 or RSA", key)
}

// decryptCosignKey opens the scrypt and NaCl secretbox envelope cosign
// (secure-systems-lab's encrypted package) wraps private keys in.
func decryptCosignKey(data, password []byte) ([]byte, error) {
	var env struct {
		KDF struct {
			Name   string `json:"name"`
			Params struct {
				N int `json:"N"`
				R int `json:"r"`
				P int `json:"p"`
			} `json:"params"`
			Salt []byte `json:"salt"`
		} `json:"kdf"`
		Cipher struct {
			Name  string `json:"name"`
			Nonce []byte `json:"nonce"`
		} `json:"cipher"`
		Ciphertext []byte `json:"ciphertext"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("read the encrypted private key: %w", err)
	}
	pr := env.KDF.Params
	// Bounds a hostile key file cannot push past: cosign's own are N 2^15, r 8, p 1.
	if env.KDF.Name != "scrypt" || env.Cipher.Name != "nacl/secretbox" || len(env.Cipher.Nonce) != 24 ||
		pr.N < 2 || pr.N > 1<<20 || pr.R < 1 || pr.R > 32 || pr.P < 1 || pr.P > 16 {
		return nil, fmt.Errorf("an encrypted private key with %s/%s (N %d r %d p %d): want scrypt and nacl/secretbox as cosign writes", env.KDF.Name, env.Cipher.Name, pr.N, pr.R, pr.P)
	}
	k, err := scrypt.Key(password, env.KDF.Salt, pr.N, pr.R, pr.P, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the key's key: %w", err)
	}
	var key [32]byte
	var nonce [24]byte
	copy(key[:], k)
	copy(nonce[:], env.Cipher.Nonce)
	out, ok := secretbox.Open(nil, env.Ciphertext, &nonce, &key)
	if !ok {
		return nil, errors.New("decrypt the private key: wrong password (cosign's COSIGN_PASSWORD)")
	}
	return out, nil
}

// Public is the signer's public key in PEM, as cosign.pub holds it.
func (s *Signer) Public() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(s.key.Public())
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// payload is the simple signing payload for digest in repo, as cosign writes it.
func payload(repo name.Repository, digest v1.Hash) []byte {
	var p struct {
		Critical struct {
			Identity struct {
				DockerReference string `json:"docker-reference"`
			} `json:"identity"`
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
		Optional map[string]any `json:"optional"`
	}
	p.Critical.Identity.DockerReference = repo.Name()
	p.Critical.Image.DockerManifestDigest = digest.String()
	p.Critical.Type = signatureType
	b, _ := json.Marshal(p)
	return b
}

// sign signs data (SHA-256, as cosign verifies with a key).
func (s *Signer) sign(data []byte) ([]byte, error) {
	if _, ok := s.key.(ed25519.PrivateKey); ok {
		return s.key.Sign(rand.Reader, data, crypto.Hash(0))
	}
	h := sha256.Sum256(data)
	return s.key.Sign(rand.Reader, h[:], crypto.SHA256)
}

// verify reports whether sig is the signer's over data.
func (s *Signer) verify(data, sig []byte) bool {
	h := sha256.Sum256(data)
	switch k := s.key.Public().(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(k, h[:], sig)
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, h[:], sig) == nil
	case ed25519.PublicKey:
		return ed25519.Verify(k, data, sig)
	}
	return false
}

// SignatureTag is where cosign keeps the signatures of digest in repo.
func SignatureTag(repo name.Repository, digest v1.Hash) name.Tag {
	return repo.Tag(strings.Replace(digest.String(), ":", "-", 1) + ".sig")
}

// signResult adds the signer's signature of digest to its signature image,
// unless it holds one already: a re-run signs nothing twice. Other
// signatures there (the publisher's, another key's) are kept.
func (p *Patcher) signResult(ctx context.Context, sess *session, repo name.Repository, digest v1.Hash) (name.Tag, error) {
	tag := SignatureTag(repo, digest)
	body := payload(repo, digest)
	sigs := emptySignatures()
	switch d, err := remote.Get(tag, sess.opts(ctx)...); {
	case err == nil:
		img, err := d.Image()
		if err != nil {
			return tag, fmt.Errorf("read the signatures at %s: %w", tag, err)
		}
		if p.signedBy(img, body) {
			return tag, nil
		}
		sigs = img
	case !notFound(err):
		return tag, fmt.Errorf("read the signatures at %s: %w", tag, err)
	}
	sigs, err := p.signer.appendSignature(sigs, body)
	if err != nil {
		return tag, fmt.Errorf("sign %s: %w", digest, err)
	}
	if err := remote.Write(tag, sigs, sess.opts(ctx)...); err != nil {
		return tag, fmt.Errorf("push the signature %s: %w", tag, err)
	}
	return tag, nil
}

// appendSignature adds the signer's signature of body to sigs.
func (s *Signer) appendSignature(sigs v1.Image, body []byte) (v1.Image, error) {
	sig, err := s.sign(body)
	if err != nil {
		return nil, err
	}
	return mutate.Append(sigs, mutate.Addendum{
		Layer:       static.NewLayer(body, SignatureMediaType),
		Annotations: map[string]string{SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)},
	})
}

// SignatureImage is a signature image holding the signer's signature of
// digest in repo alone: what SignatureTag holds once pushed.
func (s *Signer) SignatureImage(repo name.Repository, digest v1.Hash) (v1.Image, error) {
	return s.appendSignature(emptySignatures(), payload(repo, digest))
}

// SignBlob is the signature of data in base64, as cosign sign-blob --key
// writes it (cosign verify-blob --key --signature verifies it).
func (s *Signer) SignBlob(data []byte) (string, error) {
	sig, err := s.sign(data)
	return base64.StdEncoding.EncodeToString(sig), err
}

func emptySignatures() v1.Image {
	return mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
}

// signedBy reports whether img holds the signer's signature of body.
func (p *Patcher) signedBy(img v1.Image, body []byte) bool {
	m, err := img.Manifest()
	if err != nil {
		return false
	}
	for _, l := range m.Layers {
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[SignatureAnnotation])
		if err != nil || l.MediaType != SignatureMediaType || l.Size != int64(len(body)) {
			continue
		}
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			continue
		}
		rc, err := layer.Compressed()
		if err != nil {
			continue
		}
		got, err := io.ReadAll(io.LimitReader(rc, int64(len(body))+1))
		rc.Close()
		if err == nil && bytes.Equal(got, body) && p.signer.verify(body, sig) {
			return true
		}
	}
	return false
}

// WithSigner signs every result pushed, or found already there, with s.
func WithSigner(s *Signer) Option {
	return func(p *Patcher) error { p.signer = s; return nil }
}

// WithSignatureFormat says how WithSigner's signatures are stored (FormatSig
// unless said).
func WithSignatureFormat(f SignatureFormat) Option {
	return func(p *Patcher) error { p.format = f; return nil }
}
