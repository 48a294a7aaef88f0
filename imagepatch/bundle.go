package imagepatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Signatures as cosign 3 stores them by default (sign --key, its new bundle
// format): a Sigstore bundle (v0.3) holding a DSSE envelope of an in-toto
// statement about the digest, as the one layer of an OCI artifact whose
// subject is the signed manifest, found through the referrers API (or its
// fallback tag sha256-HEX, which go-containerregistry keeps where a
// registry has no referrers API). cosign verify --new-bundle-format --key
// verifies them; oras copy -r copies them with the image.
const (
	BundleMediaType    = types.MediaType("application/vnd.dev.sigstore.bundle.v0.3+json")
	emptyJSONMediaType = types.MediaType("application/vnd.oci.empty.v1+json")
	// cosignSignPredicate is the predicate type of cosign's signature statements.
	cosignSignPredicate = "https://sigstore.dev/cosign/sign/v1"
	maxBundle           = 64 << 10
)

// SignatureFormat is how results are signed: FormatSig (cosign's .sig tags,
// the default while most registries lack the referrers API) or FormatBundle.
type SignatureFormat string

const (
	FormatSig    SignatureFormat = "sig"
	FormatBundle SignatureFormat = "bundle"
)

// ParseSignatureFormat reads --signature-format.
func ParseSignatureFormat(s string) (SignatureFormat, error) {
	switch f := SignatureFormat(s); f {
	case FormatSig, FormatBundle:
		return f, nil
	}
	return "", fmt.Errorf("signature format %q: want sig (cosign's .sig tags) or bundle (a Sigstore bundle as an OCI referrer)", s)
}

type bundle struct {
	MediaType            types.MediaType `json:"mediaType"`
	VerificationMaterial struct {
		PublicKey struct {
			Hint []byte `json:"hint"`
		} `json:"publicKey"`
	} `json:"verificationMaterial"`
	DSSEEnvelope envelope `json:"dsseEnvelope"`
}

// Bundle is the signer's Sigstore bundle for digest: cosign's statement
// about it, in a DSSE envelope, the key named by its hint (the SHA-256 of
// its public key).
func (s *Signer) Bundle(digest v1.Hash) ([]byte, error) {
	st, err := Statement("", digest, cosignSignPredicate, json.RawMessage("{}"))
	if err != nil {
		return nil, err
	}
	var b bundle
	b.MediaType = BundleMediaType
	if b.DSSEEnvelope, err = s.envelope(InTotoPayloadType, st); err != nil {
		return nil, err
	}
	if b.VerificationMaterial.PublicKey.Hint, err = s.hint(); err != nil {
		return nil, err
	}
	return json.Marshal(b)
}

func (s *Signer) hint() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(s.key.Public())
	h := sha256.Sum256(der)
	return h[:], err
}

// signedBundle reports whether b is a bundle of the signer's over digest.
func (s *Signer) signedBundle(b []byte, digest v1.Hash) bool {
	var got bundle
	if json.Unmarshal(b, &got) != nil || got.DSSEEnvelope.PayloadType != InTotoPayloadType {
		return false
	}
	var st struct {
		Subject []struct {
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
		PredicateType string `json:"predicateType"`
	}
	env := got.DSSEEnvelope
	if json.Unmarshal(env.Payload, &st) != nil || st.PredicateType != cosignSignPredicate || len(st.Subject) != 1 ||
		st.Subject[0].Digest[digest.Algorithm] != digest.Hex {
		return false
	}
	for _, sig := range env.Signatures {
		if s.verify(pae(env.PayloadType, env.Payload), sig.Sig) {
			return true
		}
	}
	return false
}

// bundleArtifact is the OCI artifact holding a bundle, its subject the
// signed manifest: the empty config, one layer, cosign's annotations.
type bundleArtifact struct {
	manifest, bundle []byte
}

var emptyJSON = []byte("{}")

func newBundleArtifact(b []byte, subject v1.Descriptor) (*bundleArtifact, error) {
	blob := func(mt types.MediaType, data []byte) v1.Descriptor {
		h, n, _ := v1.SHA256(bytes.NewReader(data))
		return v1.Descriptor{MediaType: mt, Size: n, Digest: h}
	}
	cfg := blob(emptyJSONMediaType, emptyJSON)
	cfg.ArtifactType = string(BundleMediaType)
	sub := v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest}
	m, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: string(BundleMediaType),
		Config: cfg, Layers: []v1.Descriptor{blob(BundleMediaType, b)}, Subject: &sub,
		Annotations: map[string]string{"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": cosignSignPredicate}})
	return &bundleArtifact{m, b}, err
}

func (a *bundleArtifact) RawConfigFile() ([]byte, error)      { return emptyJSON, nil }
func (a *bundleArtifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *bundleArtifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *bundleArtifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	return partial.CompressedLayer(bundleLayer{a.bundle}), nil
}

type bundleLayer struct{ b []byte }

func (l bundleLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.b))
	return h, err
}
func (l bundleLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.b)), nil
}
func (l bundleLayer) Size() (int64, error) { return int64(len(l.b)), nil }
func (l bundleLayer) MediaType() (types.MediaType, error) {
	return BundleMediaType, nil
}

// bundleResult attaches the signer's bundle for digest in repo as a
// referrer, unless one is there already: a re-run signs nothing twice.
func (p *Patcher) bundleResult(ctx context.Context, sess *session, repo name.Repository, digest v1.Hash) (name.Digest, error) {
	subject := repo.Digest(digest.String())
	opts := sess.opts(ctx)
	idx, err := remote.Referrers(subject, append(opts, remote.WithFilter("artifactType", string(BundleMediaType)))...)
	if err != nil && !notFound(err) {
		return name.Digest{}, fmt.Errorf("list the referrers of %s: %w", subject, err)
	}
	if idx != nil {
		im, err := idx.IndexManifest()
		if err != nil {
			return name.Digest{}, fmt.Errorf("list the referrers of %s: %w", subject, err)
		}
		for _, d := range im.Manifests {
			if d.ArtifactType == string(BundleMediaType) && p.holdsOwnBundle(ctx, sess, repo.Digest(d.Digest.String()), digest) {
				return repo.Digest(d.Digest.String()), nil
			}
		}
	}
	desc, err := remote.Head(subject, opts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("read %s: %w", subject, err)
	}
	b, err := p.signer.Bundle(digest)
	if err != nil {
		return name.Digest{}, fmt.Errorf("sign %s: %w", digest, err)
	}
	a, err := newBundleArtifact(b, *desc)
	if err != nil {
		return name.Digest{}, err
	}
	img, err := partial.CompressedToImage(a)
	if err != nil {
		return name.Digest{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	ref := repo.Digest(d.String())
	if err := remote.Write(ref, img, opts...); err != nil {
		return ref, fmt.Errorf("push the signature of %s: %w", subject, err)
	}
	return ref, nil
}

// holdsOwnBundle reports whether the referrer at ref is the signer's bundle over digest.
func (p *Patcher) holdsOwnBundle(ctx context.Context, sess *session, ref name.Digest, digest v1.Hash) bool {
	img, err := remote.Image(ref, sess.opts(ctx)...)
	if err != nil {
		return false
	}
	m, err := img.Manifest()
	if err != nil || len(m.Layers) != 1 || m.Layers[0].MediaType != BundleMediaType || m.Layers[0].Size > maxBundle {
		return false
	}
	l, err := img.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		return false
	}
	rc, err := l.Compressed()
	if err != nil {
		return false
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxBundle+1))
	return err == nil && len(b) <= maxBundle && p.signer.signedBundle(b, digest)
}
