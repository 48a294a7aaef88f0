package runcbundle

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UnpackImage replaces the rootfs with the image's flattened filesystem and
// runs what the image's config says (entrypoint, cmd, env, working dir), as
// a container runtime would.
func (b *Bundle) UnpackImage(img v1.Image) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("read image config: %w", err)
	}
	rootfs := b.Rootfs()
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := untar(tar.NewReader(rc), rootfs); err != nil {
		return fmt.Errorf("unpack image: %w", err)
	}
	for _, d := range []string{"proc", "sys", "dev", "tmp"} {
		os.MkdirAll(filepath.Join(rootfs, d), 0o755)
	}
	args := append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...)
	if len(args) == 0 {
		return errors.New("the image has neither entrypoint nor cmd")
	}
	b.Spec.Process.Args = args
	b.Spec.Process.Env = cf.Config.Env
	if cf.Config.WorkingDir != "" {
		b.Spec.Process.Cwd = cf.Config.WorkingDir
	}
	return nil
}

func untar(tr *tar.Reader, dir string) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean("/" + h.Name)
		if name == "/" {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(h.Mode).Perm() | os.FileMode(h.Mode)&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			os.Chmod(p, mode)
		case tar.TypeReg:
			os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			os.Chmod(p, mode)
		case tar.TypeSymlink:
			os.Remove(p)
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			target := filepath.Join(dir, filepath.Clean("/"+h.Linkname))
			if !strings.HasPrefix(target, dir) {
				return fmt.Errorf("hard link %s escapes the rootfs", h.Name)
			}
			os.Remove(p)
			if err := os.Link(target, p); err != nil {
				return err
			}
		}
	}
}

// ImageFile is one extra file of BusyboxImage.
type ImageFile struct {
	Data []byte
	Mode int64
}

// BusyboxImage is a linux/amd64 OCI image of one layer: static busybox with
// its applets in /bin, the extra files, and cmd as its command.
func BusyboxImage(files map[string]ImageFile, cmd []string) (v1.Image, error) {
	bb, err := os.ReadFile(Busybox)
	if err != nil {
		return nil, err
	}
	list, err := exec.Command(Busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin", "sbin", "etc", "tmp", "proc", "sys", "dev"} {
		tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := files[n]
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(n, "/"), Typeflag: tar.TypeReg, Mode: f.Mode, Size: int64(len(f.Data))}); err != nil {
			return nil, err
		}
		tw.Write(f.Data)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	// All OCI, config included: CRI-O's copyimg refuses mixed images.
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Cmd = cmd
	cf.Config.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	return mutate.ConfigFile(img, cf)
}

// WriteOCIArchive writes img as a tar of an OCI layout naming it ref, as
// `ctr images import` (and containerd's client) reads it.
func WriteOCIArchive(path, ref string, img v1.Image) error {
	dir := path + ".layout"
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	ann := map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}
	if err := p.AppendImage(img, layout.WithAnnotations(ann)); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = rel
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
