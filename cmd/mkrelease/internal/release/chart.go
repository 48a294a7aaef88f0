package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"
)

// Chart is the Helm chart of a release, packaged as `helm package` does (a
// gzipped tar of NAME/…, named NAME-VERSION.tgz) but with fixed times,
// owners, modes and order, so that the same chart gives the same bytes.
type Chart struct {
	Name, Version, AppVersion string
	Archive                   []byte // the .tgz
	Metadata                  []byte // Chart.yaml as JSON: the config of an OCI chart
}

// FileName is the package's name, as helm names it.
func (c *Chart) FileName() string { return c.Name + "-" + c.Version + ".tgz" }

var (
	chartAppVersion = regexp.MustCompile(`(?m)^appVersion:.*$`)
	chartVersion    = regexp.MustCompile(`(?m)^version:.*$`)
	imageRepository = regexp.MustCompile(`(?m)^(image:\n(?:  .*\n)*?  repository: ).*$`)
	imageDigest     = regexp.MustCompile(`(?m)^(image:\n(?:  .*\n)*?  digest: )""`)
	// artifacthub.io/images: the image Artifact Hub scans for the chart.
	artifactHubImage = regexp.MustCompile(`(?m)^(    (?:- )?  image: ).*$`)
	semver           = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$`)
	prerelease       = regexp.MustCompile(`(?m)^(  artifacthub\.io/prerelease: ).*$`)
)

// PackageChart packages the chart in dir for the release m: its appVersion
// is the release, its version too when the release is a semantic version,
// and its image is pinned to repository@digest (the index the release
// built; repository "" keeps the chart's), so that what it installs is
// exactly the release's image.
func PackageChart(dir string, m Meta, repository, digest string) (*Chart, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file: a chart holds files only", p)
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the chart %s: %w", dir, err)
	}
	meta, values := files["Chart.yaml"], files["values.yaml"]
	if meta == nil || values == nil {
		return nil, fmt.Errorf("%s is no chart: it lacks Chart.yaml or values.yaml", dir)
	}
	meta = chartAppVersion.ReplaceAll(meta, []byte("appVersion: "+quote(m.Version)))
	v := semver.FindStringSubmatch(m.Version)
	if v != nil {
		meta = chartVersion.ReplaceAll(meta, []byte("version: "+v[1]))
	}
	// A release (1.2.3) is no pre-release; 1.2.3-rc.1 and a commit's build are.
	meta = prerelease.ReplaceAll(meta, []byte(`${1}"`+strconv.FormatBool(v == nil || strings.Contains(v[1], "-"))+`"`))
	if digest != "" {
		if !imageDigest.Match(values) {
			return nil, fmt.Errorf("%s/values.yaml has no image.digest to pin", dir)
		}
		values = imageDigest.ReplaceAll(values, []byte(`${1}"`+digest+`"`))
	}
	if repository != "" {
		if !imageRepository.Match(values) {
			return nil, fmt.Errorf("%s/values.yaml has no image.repository to set", dir)
		}
		values = imageRepository.ReplaceAll(values, []byte(`${1}`+repository))
	}
	if digest != "" { // the values' repository, set above or the chart's
		if m := imageRepository.FindSubmatchIndex(values); m != nil {
			repo := strings.TrimSpace(string(values[m[3]:m[1]]))
			meta = artifactHubImage.ReplaceAll(meta, []byte(`${1}`+repo+"@"+digest))
		}
	}
	files["Chart.yaml"], files["values.yaml"] = meta, values
	var md map[string]any
	if err := yaml.Unmarshal(meta, &md); err != nil {
		return nil, fmt.Errorf("%s/Chart.yaml: %w", dir, err)
	}
	name, _ := md["name"].(string)
	version, _ := md["version"].(string)
	appVersion, _ := md["appVersion"].(string)
	if name == "" || version == "" {
		return nil, fmt.Errorf("%s/Chart.yaml has no name and version", dir)
	}
	js, err := json.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("%s/Chart.yaml: %w", dir, err)
	}
	c := &Chart{Name: name, Version: version, AppVersion: appVersion, Metadata: js}
	if c.Archive, err = tgz(name, files, m.Created); err != nil {
		return nil, err
	}
	return c, nil
}

// quote makes s a YAML string, as helm's own Chart.yaml values are.
func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// tgz is files under prefix/, sorted, every header the same but for the
// path, mode and size; gzip's header without a name or a time.
func tgz(prefix string, files map[string][]byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		h := &tar.Header{Name: prefix + "/" + n, Mode: 0o644, Size: int64(len(files[n])), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Helm's media types for a chart in an OCI registry (helm push).
const (
	HelmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// OCI is the chart as helm push puts it in a registry: an OCI manifest whose
// config is Chart.yaml as JSON and whose one layer is the package.
func (c *Chart) OCI() (v1.Image, error) {
	layer := static.NewLayer(c.Archive, HelmChartMediaType)
	ld, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	cd := v1.Hash{Algorithm: "sha256", Hex: sum(c.Metadata)}
	manifest, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: v1.Descriptor{MediaType: HelmConfigMediaType, Digest: cd, Size: int64(len(c.Metadata))},
		Layers: []v1.Descriptor{{MediaType: HelmChartMediaType, Digest: ld, Size: int64(len(c.Archive)),
			Annotations: map[string]string{"org.opencontainers.image.title": c.FileName()}}},
		Annotations: map[string]string{"org.opencontainers.image.title": c.Name, "org.opencontainers.image.version": c.Version}})
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&ociChart{c: c, manifest: manifest, layer: layer, layerDigest: ld})
}

// PushChart pushes the chart to repo (oci://REGISTRY/PATH, as helm push
// takes it) as REGISTRY/PATH/NAME:VERSION, and returns where and its digest.
func PushChart(c *Chart, repo string, opts ...name.Option) (name.Reference, v1.Hash, error) {
	r, ok := strings.CutPrefix(repo, "oci://")
	if !ok {
		return nil, v1.Hash{}, fmt.Errorf("%q: a chart repository is oci://REGISTRY/PATH", repo)
	}
	ref, err := name.NewTag(strings.TrimSuffix(r, "/")+"/"+c.Name+":"+c.Version, opts...)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("%q: %w", repo, err)
	}
	img, err := c.OCI()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return nil, v1.Hash{}, fmt.Errorf("push the chart to %s: %w", ref, err)
	}
	d, err := img.Digest()
	return ref, d, err
}

type ociChart struct {
	c           *Chart
	manifest    []byte
	layer       v1.Layer
	layerDigest v1.Hash
}

func (o *ociChart) RawConfigFile() ([]byte, error)      { return o.c.Metadata, nil }
func (o *ociChart) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (o *ociChart) RawManifest() ([]byte, error)        { return o.manifest, nil }
func (o *ociChart) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h != o.layerDigest {
		return nil, fmt.Errorf("the chart has no layer %s", h)
	}
	return o.layer, nil
}
