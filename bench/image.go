package main

import (
	"fmt"

	"github.com/oomguard/oomguard/internal/release"
)

func init() { sections = append(sections, section{"image", benchImage}) }

// benchImage compares what pulling each platform's image moves (manifest,
// config, compressed layer) with the size of the binaries it carries.
func benchImage(int) (bool, error) {
	_, sizes, err := release.Build("build/image-bin", release.Meta{Version: "bench", Commit: "bench"})
	if err != nil {
		return false, fmt.Errorf("%w (run make image)", err)
	}
	fmt.Println("image: the release image per platform against the sum of its binaries")
	fmt.Printf("  %-14s %12s %12s %8s %8s %6s\n", "platform", "image", "binaries", "ratio", "goal", "")
	ok := true
	for _, a := range release.Arches {
		ratio := float64(sizes[a][0]) / float64(sizes[a][1])
		ok = ok && ratio <= 1.02
		fmt.Printf("  %-14s %10.2f MB %10.2f MB %7.3f× %8s %6s\n", "linux/"+a, mb(sizes[a][0]), mb(sizes[a][1]), ratio, "≤ 1.02×", verdict(ratio <= 1.02))
	}
	return ok, nil
}

func mb(n int64) float64 { return float64(n) / 1e6 }
