package release

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/imagepatch"
)

// Options are what `make release` gives Release.
type Options struct {
	Bin   string // ARCH/PROGRAM binaries (make image builds them)
	Chart string // the chart's directory
	Out   string // where the release goes
	Meta  Meta
	// PushImage (REGISTRY/REPO:TAG) and PushChart (oci://REGISTRY/PATH):
	// where to push, "" for nowhere.
	PushImage, PushChart string
	NameOptions          []name.Option
	// Signer, when set, signs SHA256SUMS, and what is pushed: the image
	// (with its SBOM and provenance as attestations) and the chart.
	Signer *imagepatch.Signer
}

// Release writes a release into Out, reproducibly (the same commit and
// binaries give the same bytes): image/, the image as an OCI layout;
// NAME-VERSION.tgz, the chart pinned to the image's digest (and to
// PushImage's repository when pushed); oomguard-VERSION.spdx.json, the
// image's SBOM; oomguard-VERSION.provenance.json, its SLSA provenance (an
// in-toto statement); SHA256SUMS of them. With a Signer, SHA256SUMS.sig
// and cosign.pub too. It pushes the image and the chart only when asked,
// signed and attested with a Signer, saying on w what it wrote and pushed.
func Release(w io.Writer, o Options) error {
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	d, err := Publish(w, o.Bin, filepath.Join(o.Out, "image"), o.PushImage, o.Meta, o.NameOptions...)
	if err != nil {
		return err
	}
	repo, _ := name.NewRepository(Repository)
	repository := "" // the chart keeps its own unless pushed elsewhere
	if o.PushImage != "" {
		ref, _ := name.ParseReference(o.PushImage, o.NameOptions...) // Publish pushed to it
		repo, repository = ref.Context(), ref.Context().Name()
	}
	chart, err := PackageChart(o.Chart, o.Meta, repository, d.String())
	if err != nil {
		return err
	}
	sbom, err := SBOM(o.Bin, d, o.Meta)
	if err != nil {
		return err
	}
	pred, err := Provenance(o.Meta, chart)
	if err != nil {
		return err
	}
	prov, err := imagepatch.Statement(repo.Name(), d, imagepatch.PredicateSLSAProvenance, pred)
	if err != nil {
		return err
	}
	prov = append(prov, '\n')
	var sums strings.Builder
	for _, f := range []struct {
		name string
		data []byte
	}{{chart.FileName(), chart.Archive}, {"oomguard-" + o.Meta.Version + ".spdx.json", sbom}, {"oomguard-" + o.Meta.Version + ".provenance.json", prov}} {
		if err := os.WriteFile(filepath.Join(o.Out, f.name), f.data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum(f.data), f.name)
	}
	// The image index is the layout's blob named by its digest d.
	fmt.Fprintf(&sums, "%s  image/blobs/sha256/%s\n", d.Hex, d.Hex)
	if err := os.WriteFile(filepath.Join(o.Out, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	if o.Signer != nil {
		if err := signFiles(o.Signer, o.Out, []byte(sums.String())); err != nil {
			return err
		}
	}
	signed := ""
	if o.Signer != nil {
		signed = ", signed (SHA256SUMS.sig, cosign.pub)"
	}
	fmt.Fprintf(w, "wrote %s: the image %s (image/), the chart %s %s pinned to it, its SBOM (SPDX) and provenance (SLSA), SHA256SUMS%s\n",
		o.Out, d, chart.Name, chart.Version, signed)
	if o.PushImage != "" && o.Signer != nil {
		if err := pushSigned(w, o.Signer, repo, d, map[string]json.RawMessage{imagepatch.PredicateSPDX: sbom, imagepatch.PredicateSLSAProvenance: pred}); err != nil {
			return err
		}
	}
	if o.PushChart != "" {
		ref, cd, err := PushChart(chart, o.PushChart, o.NameOptions...)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "pushed the chart %s@%s (helm install oomguard oci://%s --version %s)\n", ref, cd, ref.Context(), chart.Version)
		if o.Signer != nil {
			if err := pushSigned(w, o.Signer, ref.Context(), cd, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// signFiles writes SHA256SUMS.sig (cosign verify-blob's --signature) and
// the key's cosign.pub beside SHA256SUMS.
func signFiles(s *imagepatch.Signer, out string, sums []byte) error {
	sig, err := s.SignBlob(sums)
	if err != nil {
		return fmt.Errorf("sign SHA256SUMS: %w", err)
	}
	pub, err := s.Public()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "SHA256SUMS.sig"), []byte(sig), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "cosign.pub"), pub, 0o644)
}

// pushSigned pushes the signature of d in repo, and its attestations when
// there are predicates, where cosign looks for them.
func pushSigned(w io.Writer, s *imagepatch.Signer, repo name.Repository, d v1.Hash, predicates map[string]json.RawMessage) error {
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	sig, err := s.SignatureImage(repo, d)
	if err != nil {
		return fmt.Errorf("sign %s@%s: %w", repo, d, err)
	}
	tag := imagepatch.SignatureTag(repo, d)
	if err := remote.Write(tag, sig, opts...); err != nil {
		return fmt.Errorf("push the signature %s: %w", tag, err)
	}
	fmt.Fprintf(w, "signed %s@%s (%s)\n", repo, d, tag)
	if len(predicates) == 0 {
		return nil
	}
	att, err := s.AttestationImage(repo, d, predicates)
	if err != nil {
		return fmt.Errorf("attest %s@%s: %w", repo, d, err)
	}
	tag = imagepatch.AttestationTag(repo, d)
	if err := remote.Write(tag, att, opts...); err != nil {
		return fmt.Errorf("push the attestations %s: %w", tag, err)
	}
	fmt.Fprintf(w, "attested %s@%s: its SBOM and provenance (%s)\n", repo, d, tag)
	return nil
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
