package main

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/test/registrytest"
)

func init() { sections = append(sections, section{"imagepatch", benchImagepatch}) }

const (
	benchJobs    = 8
	craneVersion = "v0.22.1"
)

var benchTags, benchLayerMiB = 200, 10

// benchImagepatch patches 200 tags of 3 × 10 MB layers in Debian's registry
// with imagepatch, and the same patch with a loop of crane append + crane
// mutate on an identical repository, in the same run.
func benchImagepatch(int) (bool, error) {
	bin, err := built("imagepatch")
	if err != nil {
		return false, err
	}
	crane, err := buildCrane()
	if err != nil {
		return false, err
	}
	return withRegistry("imagepatch", func(dir string, reg *registrytest.Registry) (bool, error) {

		fmt.Fprintf(os.Stderr, "seeding %d tags × 2 repositories…\n", benchTags)
		baseLayers, err := seedBench(reg.Host, []string{"bench/ip", "bench/crane"})
		if err != nil {
			return false, err
		}
		layerTar := filepath.Join(dir, "patch.tar")
		if err := os.WriteFile(layerTar, mustLayerTar(), 0o644); err != nil {
			return false, err
		}

		// The seeding's 30 MB are written back before either side is
		// timed: the registry fsyncs what it writes, and on ext4 its first
		// fsyncs would otherwise wait for them, in whichever side runs first.
		syscall.Sync()
		reg.Reset()
		start := time.Now()
		out, err := exec.Command(bin, "apply", "--repo", reg.Host+"/bench/ip", "--tag-regex", "^t[0-9]+$", "--jobs", fmt.Sprint(benchJobs)).CombinedOutput()
		ipTime := time.Since(start)
		if err != nil {
			return false, fmt.Errorf("imagepatch apply: %v\n%s", err, out)
		}
		var up, baseDown int64
		ipReqs := reg.Requests()
		for _, q := range ipReqs {
			if q.Method == http.MethodPut || q.Method == http.MethodPatch || q.Method == http.MethodPost {
				up += q.In
			}
			if q.Method == http.MethodGet && strings.Contains(q.Path, "/blobs/") {
				for _, d := range baseLayers {
					if strings.HasSuffix(q.Path, d) {
						baseDown += q.Out
					}
				}
			}
		}
		patchLayer, _ := imagepatch.ShimSpec().Layer("amd64", types.OCILayer)
		pl, _ := patchLayer.Size()
		perTag := float64(up-pl) / float64(benchTags)

		// The same work as a user would script it: crane append + crane mutate
		// per tag, benchJobs tags at a time (xargs -P), like imagepatch --jobs.
		syscall.Sync()
		reg.Reset()
		start = time.Now()
		if err := craneLoop(crane, reg.Host, layerTar); err != nil {
			return false, err
		}
		craneTime := time.Since(start)
		craneReqs := reg.Requests()

		speedup := float64(craneTime) / float64(ipTime)
		ipPerTag, cranePerTag := float64(len(ipReqs))/float64(benchTags), float64(len(craneReqs))/float64(benchTags)
		fast, small := speedup >= 5, perTag <= 16<<10 && baseDown == 0
		fmt.Printf("imagepatch: %d tags of 3 × %d MB layers in Debian's docker-registry\n", benchTags, benchLayerMiB)
		fmt.Printf("  %-44s %10s %6.1f requests a tag: %s\n", fmt.Sprintf("crane append + crane mutate, %d at a time", benchJobs), fmt.Sprintf("%.1f s", craneTime.Seconds()), cranePerTag, breakdown(craneReqs))
		fmt.Printf("  %-44s %10s %6.1f requests a tag: %s\n", fmt.Sprintf("imagepatch apply --jobs %d", benchJobs), fmt.Sprintf("%.1f s", ipTime.Seconds()), ipPerTag, breakdown(ipReqs))
		fmt.Printf("  speed-up %.1f× at equal concurrency, %.1f requests a tag against %.1f (goal ≥ 5×): %s\n", speedup, ipPerTag, cranePerTag, verdict(fast))
		fmt.Printf("  uploaded %.1f KiB per tag after the patch layer (goal ≤ 16 KiB); base-layer bytes downloaded: %d (goal 0): %s\n", perTag/1024, baseDown, verdict(small))
		ok := fast && small
		return ok, nil
	})
}

// requestKind names what a registry request is: the /v2/ ping, a token,
// a manifest, a blob or an upload, a tag listing, by method.
func requestKind(q registrytest.Request) string {
	p := q.Path
	switch {
	case p == "/v2/" || p == "/v2":
		return "ping"
	case strings.Contains(p, "/token") || strings.Contains(q.Query, "service="):
		return "token"
	case strings.Contains(p, "/manifests/"):
		return "manifest " + q.Method
	case strings.Contains(p, "/blobs/uploads"):
		return "upload " + q.Method
	case strings.Contains(p, "/blobs/"):
		return "blob " + q.Method
	case strings.HasSuffix(p, "/tags/list"):
		return "tags " + q.Method
	}
	return "other " + q.Method
}

// breakdown is requests a tag by kind, most first.
func breakdown(reqs []registrytest.Request) string {
	n := map[string]int{}
	for _, q := range reqs {
		n[requestKind(q)]++
	}
	kinds := slices.SortedFunc(maps.Keys(n), func(a, b string) int {
		if c := cmp.Compare(n[b], n[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(n[k])/float64(benchTags)))
	}
	return strings.Join(parts, ", ")
}

// seedBench pushes the same three layers and benchTags configs to each repository.
func seedBench(host string, repos []string) ([]string, error) {
	var layers []v1.Layer
	var digests []string
	for range 3 {
		l, err := random.Layer(int64(benchLayerMiB)<<20, types.OCILayer)
		if err != nil {
			return nil, err
		}
		d, _ := l.Digest()
		layers, digests = append(layers, l), append(digests, d.String())
	}
	base, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	if err != nil {
		return nil, err
	}
	for _, repo := range repos {
		for i := range benchTags {
			cf, err := base.ConfigFile()
			if err != nil {
				return nil, err
			}
			cf = cf.DeepCopy()
			cf.OS, cf.Architecture = "linux", "amd64"
			cf.Config.Entrypoint = []string{"/entrypoint"}
			cf.Config.Labels = map[string]string{"build": fmt.Sprint(i)}
			img, err := mutate.ConfigFile(base, cf)
			if err != nil {
				return nil, err
			}
			tag, err := name.NewTag(fmt.Sprintf("%s/%s:t%03d", host, repo, i))
			if err != nil {
				return nil, err
			}
			if err := remote.Write(tag, img); err != nil {
				return nil, err
			}
		}
	}
	return digests, nil
}

func mustLayerTar() []byte {
	l, _ := imagepatch.ShimSpec().Layer("amd64", types.OCILayer)
	rc, _ := l.Uncompressed()
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(b.String())
}

// buildCrane builds go-containerregistry's crane from the module proxy, once.
func buildCrane() (string, error) {
	cache, err := filepath.Abs(filepath.Join("build", "bench"))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "crane-"+craneVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	mod := filepath.Join(cache, "crane-module")
	os.MkdirAll(mod, 0o755)
	steps := [][]string{
		{"go", "mod", "init", "cranebuild"},
		{"go", "get", "github.com/google/go-containerregistry/cmd/crane@" + craneVersion},
		{"go", "build", "-o", bin, "github.com/google/go-containerregistry/cmd/crane"},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "already exists") {
			return "", fmt.Errorf("build crane (%s): %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return bin, nil
}

// craneLoop runs crane append and crane mutate for every tag: the first
// alone, so that the patch layer is uploaded once (parallel uploads of one new
// blob make the registry fail some with DIGEST_INVALID), then benchJobs tags
// at a time.
func craneLoop(crane, host, layerTar string) error {
	one := func(i int) error {
		src := fmt.Sprintf("%s/bench/crane:t%03d", host, i)
		dst := src + "-crane"
		if out, err := exec.Command(crane, "append", "-b", src, "-f", layerTar, "-t", dst).CombinedOutput(); err != nil {
			return fmt.Errorf("crane append: %v: %s", err, out)
		}
		if out, err := exec.Command(crane, "mutate", dst, "--entrypoint", "/.oomguard/oomguard-init,--,/entrypoint", "-t", dst).CombinedOutput(); err != nil {
			return fmt.Errorf("crane mutate: %v: %s", err, out)
		}
		return nil
	}
	if err := one(0); err != nil {
		return err
	}
	tags := make(chan int)
	errs := make(chan error, benchJobs)
	var wg sync.WaitGroup
	for range benchJobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tags {
				if err := one(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 1; i < benchTags; i++ {
		select {
		case tags <- i:
		case err := <-errs:
			close(tags)
			wg.Wait()
			return err
		}
	}
	close(tags)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
