//go:build e2e

package imagebuild

import (
	"archive/tar"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The set is what it says: each image in its format and compression, the
// systemd image a layer over the minimal one with merged /usr and systemd
// as /sbin/init, the lists with their platforms, the arm64 entry on the
// amd64 layers, the Windows entry with a layer of its own.
func TestE2EImageSet(t *testing.T) {
	set, err := Build(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	layerType := map[string]types.MediaType{"docker-gzip": types.DockerLayer, "oci-gzip": types.OCILayer, "oci-zstd": types.OCILayerZStd}
	manifestType := map[string]types.MediaType{"docker-gzip": types.DockerManifestSchema2, "oci-gzip": types.OCIManifestSchema1, "oci-zstd": types.OCIManifestSchema1}
	indexType := map[string]types.MediaType{"docker-gzip": types.DockerManifestList, "oci-gzip": types.OCIImageIndex, "oci-zstd": types.OCIImageIndex}
	checkImage := func(ref string, img v1.Image, format string, layers int) {
		t.Helper()
		m, err := img.Manifest()
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if m.MediaType != manifestType[format] && !(m.MediaType == "" && manifestType[format] == types.OCIManifestSchema1) {
			t.Errorf("%s: manifest %s, want %s", ref, m.MediaType, manifestType[format])
		}
		if len(m.Layers) != layers {
			t.Errorf("%s: %d layers, want %d", ref, len(m.Layers), layers)
		}
		for _, l := range m.Layers {
			if l.MediaType != layerType[format] {
				t.Errorf("%s: layer %s, want %s", ref, l.MediaType, layerType[format])
			}
		}
	}
	for _, f := range Formats {
		min, err := set.Image(Minimal + ":" + f)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(Minimal+":"+f, min, f, 1)
		sd, err := set.Image(Systemd + ":" + f)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(Systemd+":"+f, sd, f, 2)
		cf, _ := sd.ConfigFile()
		if cf.OS != "linux" || cf.Architecture != "amd64" || strings.Join(cf.Config.Cmd, " ") != "/sbin/init" || len(cf.Config.Entrypoint) != 0 || cf.Config.StopSignal != "SIGRTMIN+3" {
			t.Errorf("%s: config %+v", Systemd+":"+f, cf.Config)
		}
		ml, _ := min.Layers()
		sl, _ := sd.Layers()
		md, _ := ml[0].Digest()
		sdd, _ := sl[0].Digest()
		if md != sdd {
			t.Errorf("%s is not built on %s", Systemd+":"+f, Minimal+":"+f)
		}

		idx, err := set.Index(Index + ":" + f)
		if err != nil {
			t.Fatal(err)
		}
		im, _ := idx.IndexManifest()
		if im.MediaType != indexType[f] {
			t.Errorf("%s: %s, want %s", Index+":"+f, im.MediaType, indexType[f])
		}
		var plats []string
		var amd64Layers []v1.Descriptor
		for _, d := range im.Manifests {
			plats = append(plats, d.Platform.OS+"/"+d.Platform.Architecture)
			e, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			ecf, _ := e.ConfigFile()
			if ecf.OS != d.Platform.OS || ecf.Architecture != d.Platform.Architecture {
				t.Errorf("%s: entry %s has a %s/%s config", Index+":"+f, d.Platform, ecf.OS, ecf.Architecture)
			}
			em, _ := e.Manifest()
			switch {
			case ecf.OS == "windows":
				checkImage(Index+":"+f+" "+d.Platform.String(), e, f, 1)
			case ecf.Architecture == "amd64":
				checkImage(Index+":"+f+" "+d.Platform.String(), e, f, 2)
				amd64Layers = em.Layers
			default:
				// buildah config --arch + commit: the amd64 layers and an
				// empty one of its own (a tar of no files).
				checkImage(Index+":"+f+" "+d.Platform.String(), e, f, 3)
				if len(em.Layers) != 3 || em.Layers[0].Digest != amd64Layers[0].Digest || em.Layers[1].Digest != amd64Layers[1].Digest || em.Layers[2].Size > 1024 {
					t.Errorf("%s: the arm64 entry is not on the amd64 layers: %v", Index+":"+f, em.Layers)
				}
			}
		}
		want := "linux/amd64 linux/arm64"
		if f != "docker-gzip" {
			want += " windows/amd64"
		}
		if strings.Join(plats, " ") != want {
			t.Errorf("%s: %s, want %s", Index+":"+f, plats, want)
		}
	}

	// Merged /usr, systemd as /sbin/init, the services installed.
	sd, _ := set.Image(Systemd + ":oci-zstd")
	ls, _ := sd.Layers()
	want := map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib"}
	seen := map[string]bool{}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			n := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
			if target, ok := want[n]; ok && (h.Typeflag != tar.TypeSymlink || h.Linkname != target) {
				t.Errorf("/%s is not a link to %s (merged /usr): %c %s", n, target, h.Typeflag, h.Linkname)
			}
			seen[n] = true
			if n == "usr/sbin/init" && h.Linkname != "/lib/systemd/systemd" {
				t.Errorf("/sbin/init -> %s", h.Linkname)
			}
		}
		rc.Close()
	}
	for _, p := range []string{"bin", "usr/sbin/init", "lib/systemd/systemd", "usr/sbin/cron", "usr/bin/dbus-daemon", "usr/sbin/rsyslogd"} {
		if !seen[p] && !seen["usr/"+p] {
			t.Errorf("/%s is in no layer", p)
		}
	}
}
