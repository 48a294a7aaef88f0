package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/oomguard/oomguard/test/testbin"
)

func init() { sections = append(sections, section{"image", benchImage}) }

// benchImage compares what pulling each platform's image make image wrote
// moves (manifest, config, compressed layers) with the size of the
// binaries it carries.
func benchImage(int) (bool, error) {
	idx, err := testbin.ReleaseIndex("build/image")
	if err != nil {
		return false, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return false, err
	}
	fmt.Println("image: the release image per platform (build/image) against the sum of its binaries (build/image-bin)")
	fmt.Printf("  %-14s %12s %12s %8s %8s %6s\n", "platform", "image", "binaries", "ratio", "goal", "")
	ok := true
	for _, d := range im.Manifests {
		if d.Platform == nil {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return false, err
		}
		m, err := img.Manifest()
		if err != nil {
			return false, err
		}
		size := d.Size + m.Config.Size
		for _, l := range m.Layers {
			size += l.Size
		}
		bins, err := dirBytes(filepath.Join("build/image-bin", d.Platform.Architecture))
		if err != nil {
			return false, fmt.Errorf("%w (run make image)", err)
		}
		ratio := float64(size) / float64(bins)
		ok = ok && ratio <= 1.02
		fmt.Printf("  %-14s %10.2f MB %10.2f MB %7.3f× %8s %6s\n", d.Platform.OS+"/"+d.Platform.Architecture, mb(size), mb(bins), ratio, "≤ 1.02×", verdict(ratio <= 1.02))
	}
	return ok, nil
}

// dirBytes is the size of the files in dir.
func dirBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n, nil
}

func mb(n int64) float64 { return float64(n) / 1e6 }
