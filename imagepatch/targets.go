package imagepatch

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Selector picks tags of one repository: any glob or the regexp must match.
type Selector struct {
	Globs  []string
	Regexp *regexp.Regexp
}

// Bounds on a tag listing: a registry can link a next page for ever.
const MaxTags = 100_000

var maxPages = 10_000

// ArtifactTag matches the tags signing tools and registries without the
// referrers API give what they attach to an image: cosign's
// sha256-HEX.sig, .att and .sbom, and the OCI referrers fallback tag
// sha256-HEX. They name no image to patch.
var ArtifactTag = regexp.MustCompile(`^sha256-[0-9a-f]{64}(\.(sig|att|sbom))?$`)

// Tags lists the repository's tags (every page) that the selector picks,
// leaving out the tags of artifacts (ArtifactTag). A listing over MaxTags
// tags, or that links pages without end, is an error.
func (s Selector) Tags(ctx context.Context, repo name.Repository, opts ...remote.Option) ([]name.Tag, error) {
	tags, _, err := s.Select(ctx, repo, opts...)
	return tags, err
}

// Select is Tags, and how many tags of artifacts the selector would have
// picked and left out.
func (s Selector) Select(ctx context.Context, repo name.Repository, opts ...remote.Option) ([]name.Tag, int, error) {
	for _, g := range s.Globs {
		if _, err := path.Match(g, ""); err != nil {
			return nil, 0, fmt.Errorf("tag glob %q: %w", g, err)
		}
	}
	puller, err := remote.NewPuller(append([]remote.Option{remote.WithContext(ctx)}, opts...)...)
	if err != nil {
		return nil, 0, err
	}
	lister, err := puller.Lister(ctx, repo)
	if err != nil {
		return nil, 0, fmt.Errorf("list tags of %s: %w", repo, err)
	}
	var out []name.Tag
	artifacts := 0
	seen := map[string]bool{}
	for pages := 0; lister.HasNext(); pages++ {
		page, err := lister.Next(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("list tags of %s: %w", repo, err)
		}
		if pages >= maxPages || len(seen)+len(page.Tags) > MaxTags {
			return nil, 0, fmt.Errorf("list tags of %s: over %d tags in %d pages: select tags by reference or --from-file instead", repo, len(seen), pages)
		}
		for _, t := range page.Tags {
			if seen[t] {
				continue
			}
			seen[t] = true
			switch {
			case !s.picks(t):
			case ArtifactTag.MatchString(t):
				artifacts++
			default:
				out = append(out, repo.Tag(t))
			}
		}
	}
	return out, artifacts, nil
}

func (s Selector) picks(tag string) bool {
	if len(s.Globs) == 0 && s.Regexp == nil {
		return true
	}
	for _, g := range s.Globs {
		if ok, _ := path.Match(g, tag); ok {
			return true
		}
	}
	return s.Regexp != nil && s.Regexp.MatchString(tag)
}

// ParseTag reads an image reference that must name a tag ("latest" when none).
func ParseTag(ref string, opts ...name.Option) (name.Tag, error) {
	if strings.Contains(ref, "@") {
		return name.Tag{}, fmt.Errorf("%q names a digest: imagepatch works on tags, since results are named after them", ref)
	}
	t, err := name.NewTag(ref, opts...)
	if err != nil {
		return name.Tag{}, fmt.Errorf("%q is not an image reference: %w", ref, err)
	}
	return t, nil
}

// ReadRefs reads one reference a line; blank lines and # comments are skipped.
func ReadRefs(r io.Reader, opts ...name.Option) ([]name.Tag, error) {
	var out []name.Tag
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := ParseTag(line, opts...)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, t)
	}
	return out, sc.Err()
}
