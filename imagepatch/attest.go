package imagepatch

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Attestations as cosign attest --key stores them without a transparency
// log: an in-toto statement about a digest, signed as a DSSE envelope, as
// a layer of an image under the tag sha256-HEX.att beside it, its
// predicate's type in the layer's annotations. cosign verify-attestation
// --key verifies them.
const (
	DSSEMediaType     = types.MediaType("application/vnd.dsse.envelope.v1+json")
	InTotoPayloadType = "application/vnd.in-toto+json"
	// Predicate types cosign verify-attestation --type names spdxjson and
	// slsaprovenance1.
	PredicateSPDX           = "https://spdx.dev/Document"
	PredicateSLSAProvenance = "https://slsa.dev/provenance/v1"
)

// Statement is an in-toto statement (v1) that predicate, of predicateType,
// holds of digest, its subject named so ("": by its digest alone).
func Statement(named string, digest v1.Hash, predicateType string, predicate json.RawMessage) ([]byte, error) {
	type subject struct {
		Name   string            `json:"name,omitempty"`
		Digest map[string]string `json:"digest"`
	}
	return json.Marshal(struct {
		Type          string          `json:"_type"`
		Subject       []subject       `json:"subject"`
		PredicateType string          `json:"predicateType"`
		Predicate     json.RawMessage `json:"predicate"`
	}{"https://in-toto.io/Statement/v1", []subject{{named, map[string]string{digest.Algorithm: digest.Hex}}}, predicateType, predicate})
}

// envelope is a DSSE envelope, as JSON holds it.
type envelope struct {
	PayloadType string         `json:"payloadType"`
	Payload     []byte         `json:"payload"`
	Signatures  []envSignature `json:"signatures"`
}

type envSignature struct {
	KeyID string `json:"keyid,omitempty"`
	Sig   []byte `json:"sig"`
}

// pae is DSSE's pre-authentication encoding: what an envelope's signatures sign.
func pae(payloadType string, payload []byte) []byte {
	return fmt.Appendf(nil, "DSSEv1 %d %s %d %s", len(payloadType), payloadType, len(payload), payload)
}

func (s *Signer) envelope(payloadType string, payload []byte) (envelope, error) {
	sig, err := s.sign(pae(payloadType, payload))
	return envelope{payloadType, payload, []envSignature{{Sig: sig}}}, err
}

// Envelope signs payload as a DSSE envelope, in JSON.
func (s *Signer) Envelope(payloadType string, payload []byte) ([]byte, error) {
	env, err := s.envelope(payloadType, payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(env)
}

// AttestationTag is where cosign keeps the attestations of digest in repo.
func AttestationTag(repo name.Repository, digest v1.Hash) name.Tag {
	return repo.Tag(strings.Replace(digest.String(), ":", "-", 1) + ".att")
}

// AttestationImage signs each statement (by its predicate type) about digest
// in repo and holds them as cosign does, for AttestationTag.
func (s *Signer) AttestationImage(repo name.Repository, digest v1.Hash, predicates map[string]json.RawMessage) (v1.Image, error) {
	img := emptySignatures()
	for _, pt := range slices.Sorted(maps.Keys(predicates)) {
		st, err := Statement(repo.Name(), digest, pt, predicates[pt])
		if err != nil {
			return nil, err
		}
		env, err := s.Envelope(InTotoPayloadType, st)
		if err != nil {
			return nil, fmt.Errorf("sign the %s statement: %w", pt, err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(env, DSSEMediaType),
			Annotations: map[string]string{SignatureAnnotation: "", "predicateType": pt}}); err != nil {
			return nil, err
		}
	}
	return img, nil
}
