package release

import (
	"encoding/json"
	"regexp"
	"time"
)

var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Provenance is the SLSA provenance (v1) predicate of the image whose index
// digest is the release's: built by make release from the commit, with the
// chart's digest among its byproducts; fixed for a commit, as the image is.
func Provenance(m Meta, chart *Chart) (json.RawMessage, error) {
	type digest map[string]string
	type resource struct {
		URI    string `json:"uri,omitempty"`
		Name   string `json:"name,omitempty"`
		Digest digest `json:"digest,omitempty"`
	}
	src := resource{URI: "git+" + Source}
	if fullCommit.MatchString(m.Commit) {
		src.Digest = digest{"gitCommit": m.Commit}
	}
	var p struct {
		BuildDefinition struct {
			BuildType            string            `json:"buildType"`
			ExternalParameters   map[string]string `json:"externalParameters"`
			ResolvedDependencies []resource        `json:"resolvedDependencies"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
			Metadata struct {
				StartedOn string `json:"startedOn"`
			} `json:"metadata"`
			Byproducts []resource `json:"byproducts"`
		} `json:"runDetails"`
	}
	p.BuildDefinition.BuildType = Source + "/blob/main/docs/release.md#make-release"
	p.BuildDefinition.ExternalParameters = map[string]string{"release": m.Version, "commit": m.Commit}
	p.BuildDefinition.ResolvedDependencies = []resource{src}
	p.RunDetails.Builder.ID = Source + "/blob/main/Makefile#release"
	p.RunDetails.Metadata.StartedOn = m.Created.UTC().Format(time.RFC3339)
	p.RunDetails.Byproducts = []resource{{Name: chart.FileName(), Digest: digest{"sha256": sum(chart.Archive)}}}
	return json.Marshal(p)
}
