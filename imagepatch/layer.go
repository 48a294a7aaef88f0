package imagepatch

import (
	"archive/tar"
	"bytes"
	"io"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerTime is every entry's mtime: a patch layer depends on its files only.
var layerTime = time.Unix(0, 0).UTC()

// layerTar is the patch's files for arch as a tar: sorted entries, owner
// 0:0, fixed times and modes. Parent directories are not in it: the image's
// own are kept as they are (a file in /tmp must not make /tmp 0755), and a
// runtime creates missing ones 0755.
func (s *Spec) layerTar(arch string) ([]byte, error) {
	type entry struct {
		name string
		mode int64
		data []byte
		link string
	}
	entries := map[string]entry{}
	for _, f := range s.Files {
		data, ok := f.data[arch]
		if !ok {
			data = f.data[""]
		}
		name := strings.TrimPrefix(f.Path, "/")
		entries[name] = entry{name: name, mode: f.Mode, data: data, link: f.Link}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: layerTime, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.link != "" {
			h.Typeflag, h.Linkname, h.Mode, h.Size = tar.TypeSymlink, e.link, 0o777, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer is the patch layer for arch, compressed as mt asks (OCI or Docker
// gzip), the same bytes and digest every time.
func (s *Spec) Layer(arch string, mt types.MediaType) (v1.Layer, error) {
	tb, err := s.layerTar(arch)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tb)), nil
	}, tarball.WithMediaType(mt), tarball.WithCompressedCaching)
}
