package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// An SPDX 2.3 document (JSON) of the release image, made from what the Go
// toolchain recorded in each binary (debug/buildinfo): the image, each
// program of each platform with its checksum, the Go modules each links and
// the standard library of the Go it was built with. Its time is the
// commit's and its namespace the image's digest: the same release gives
// the same bytes.

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string       `json:"name"`
	SPDXID           string       `json:"SPDXID"`
	VersionInfo      string       `json:"versionInfo,omitempty"`
	DownloadLocation string       `json:"downloadLocation"`
	FilesAnalyzed    bool         `json:"filesAnalyzed"`
	Supplier         string       `json:"supplier,omitempty"`
	PrimaryPurpose   string       `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxSum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExtRef `json:"externalRefs,omitempty"`
	Comment          string       `json:"comment,omitempty"`
	LicenseDeclared  string       `json:"licenseDeclared,omitempty"`
	LicenseConcluded string       `json:"licenseConcluded,omitempty"`
}

type spdxSum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExtRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// spdxIDUnsafe is what an SPDX identifier may not hold (letters, digits,
// '.' and '-' only).
var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(parts ...string) string {
	return "SPDXRef-" + strings.Trim(spdxIDUnsafe.ReplaceAllString(strings.Join(parts, "-"), "-"), "-")
}

// SBOM is the SPDX document of the image whose index digest is digest,
// from the ARCH/PROGRAM binaries in bin.
func SBOM(bin string, digest v1.Hash, m Meta) ([]byte, error) {
	image := spdxPackage{Name: Repository, SPDXID: "SPDXRef-image", VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
		PrimaryPurpose: "CONTAINER", Supplier: "Organization: oomguard", LicenseDeclared: "Apache-2.0",
		Checksums:    []spdxSum{{"SHA256", digest.Hex}},
		ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", fmt.Sprintf("pkg:oci/oomguard@%s?repository_url=%s", digest, Repository)}},
		Comment:      "An OCI image index (linux/" + strings.Join(Arches, ", linux/") + ") of commit " + m.Commit}
	doc := spdxDocument{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "oomguard-" + m.Version,
		DocumentNamespace: "https://github.com/oomguard/oomguard/spdx/" + digest.Hex,
		CreationInfo:      spdxCreationInfo{Created: m.Created.UTC().Format(time.RFC3339), Creators: []string{"Tool: oomguard-mkrelease", "Organization: oomguard"}},
		Packages:          []spdxPackage{image},
		Relationships:     []spdxRelationship{{"SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID}}}
	deps := map[string]spdxPackage{}
	for _, arch := range Arches {
		for _, prog := range Programs {
			path := filepath.Join(bin, arch, prog)
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("the SBOM's %s/%s: %w", arch, prog, err)
			}
			info, err := buildinfo.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("the build information of %s (a Go binary built by make image): %w", path, err)
			}
			sum := sha256.Sum256(b)
			p := spdxPackage{Name: prog, SPDXID: spdxID(arch, prog), VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
				PrimaryPurpose: "APPLICATION", Supplier: "Organization: oomguard", LicenseDeclared: "Apache-2.0",
				Checksums: []spdxSum{{"SHA256", hex.EncodeToString(sum[:])}},
				ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl",
					fmt.Sprintf("pkg:golang/%s@%s?goarch=%s&goos=linux#%s", info.Main.Path, m.Version, arch, strings.TrimPrefix(info.Path, info.Main.Path+"/"))}},
				Comment: fmt.Sprintf("/usr/local/bin/%s for linux/%s, built with %s from %s", prog, arch, info.GoVersion, info.Path)}
			doc.Packages = append(doc.Packages, p)
			doc.Relationships = append(doc.Relationships, spdxRelationship{image.SPDXID, "CONTAINS", p.SPDXID})
			std := strings.TrimPrefix(info.GoVersion, "go")
			mods := []spdxPackage{{Name: "stdlib", SPDXID: spdxID("gomod", "stdlib", std), VersionInfo: std, DownloadLocation: "https://go.dev/dl/",
				LicenseDeclared: "BSD-3-Clause", ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + std}}}}
			for _, d := range info.Deps {
				if d.Replace != nil {
					d = d.Replace
				}
				mods = append(mods, spdxPackage{Name: d.Path, SPDXID: spdxID("gomod", d.Path, d.Version), VersionInfo: d.Version,
					DownloadLocation: "https://proxy.golang.org/" + d.Path + "/@v/" + d.Version + ".zip",
					ExternalRefs:     []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + d.Path + "@" + d.Version}},
					Comment:          "go.sum " + d.Sum})
			}
			for _, mod := range mods {
				mod.LicenseConcluded = "NOASSERTION"
				if mod.LicenseDeclared == "" {
					mod.LicenseDeclared = "NOASSERTION"
				}
				deps[mod.SPDXID] = mod
				doc.Relationships = append(doc.Relationships, spdxRelationship{p.SPDXID, "DEPENDS_ON", mod.SPDXID})
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(deps)) {
		doc.Packages = append(doc.Packages, deps[id])
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
