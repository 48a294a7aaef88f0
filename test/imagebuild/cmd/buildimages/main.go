// buildimages builds the real images the image tests patch (imagebuild),
// before the tests, so that no test's timeout depends on a warm build/images.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/oomguard/oomguard/test/imagebuild"
)

func main() {
	start := time.Now()
	if _, err := imagebuild.Build(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }); err != nil {
		fmt.Fprintf(os.Stderr, "buildimages: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "images: %s ready in %s\n", imagebuild.Key(), time.Since(start).Round(time.Second))
}
