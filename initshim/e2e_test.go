//go:build e2e

package initshim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/runcbundle"
	"github.com/oomguard/oomguard/test/testbin"
)

// buildShim builds the shim as `make build` does, with a build cache of its own.
func buildShim(t *testing.T, goarch, cache string) []byte {
	t.Helper()
	env := []string{"GOOS=linux", "GOARCH=" + goarch}
	if cache != "" {
		env = append(env, "GOCACHE="+cache)
	}
	out, err := testbin.Build(t.TempDir(), "oomguard-init", "./cmd/oomguard-init", env...)
	if err != nil {
		t.Fatalf("build for %s: %v", goarch, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The init of the container: what PID 1 sees, then a child's score.
const reportInit = `#!/bin/sh
echo "pid=$$"
echo "score=$(cat /proc/self/oom_score_adj)"
sh -c 'echo "child=$(cat /proc/self/oom_score_adj)"'
echo "argv=$0|$*"
echo "env=container=$container NOTIFY_SOCKET=$NOTIFY_SOCKET LISTEN_FDS=$LISTEN_FDS EXTRA=$EXTRA"
`

func shimContainer(t *testing.T, shim []byte, args ...string) runcbundle.Result {
	t.Helper()
	if err := runcbundle.Available(); err != nil {
		t.Fatalf("e2e needs runc: %v", err)
	}
	b, err := runcbundle.New(filepath.Join(t.TempDir(), "bundle"), append([]string{"/.oomguard/oomguard-init"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddFile("/.oomguard/oomguard-init", shim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.AddFile("/sbin/init", []byte(reportInit), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.AddFile("/sbin/noexec", []byte(reportInit), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Spec.Process.Env = append(b.Spec.Process.Env, "container=oci", "NOTIFY_SOCKET=/run/systemd/notify", "LISTEN_FDS=0", "EXTRA=a b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := b.Run(ctx, "oomguard-init-e2e-"+filepath.Base(filepath.Dir(b.Dir)))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func hostShim(t *testing.T) []byte { return buildShim(t, runtime.GOARCH, "") }

func TestE2EShimKeepsPID1(t *testing.T) {
	res := shimContainer(t, hostShim(t), "--", "/sbin/init", "--system", "two words")
	want := []string{
		"pid=1", "score=900", "child=900",
		"argv=/sbin/init|--system two words",
		"env=container=oci NOTIFY_SOCKET=/run/systemd/notify LISTEN_FDS=0 EXTRA=a b",
	}
	for _, w := range want {
		if !strings.Contains(res.Stdout, w+"\n") {
			t.Errorf("missing %q", w)
		}
	}
	if res.ExitCode != 0 || res.Stderr != "" || t.Failed() {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestE2EShimDefaultTarget(t *testing.T) {
	res := shimContainer(t, hostShim(t))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "pid=1\nscore=900\n") || !strings.Contains(res.Stdout, "argv=/sbin/init|\n") {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// runc's default capabilities lack CAP_SYS_RESOURCE: lowering is refused by
// the kernel, the shim says so, and the init still boots.
func TestE2EShimLoweringWithoutCapability(t *testing.T) {
	res := shimContainer(t, hostShim(t), "--oom-score-adj", "-500", "--allow-lower", "/sbin/init")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "pid=1\n") || strings.Contains(res.Stdout, "score=-500") ||
		!strings.Contains(res.Stderr, "cannot set oom_score_adj to -500: permission denied (lowering the score needs CAP_SYS_RESOURCE)") {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestE2EShimExecFailures(t *testing.T) {
	shim := hostShim(t)
	for _, tc := range []struct {
		target string
		code   int
		msg    string
	}{
		{"/sbin/missing", 127, "oomguard-init: /sbin/missing: no such file or directory"},
		{"/sbin/noexec", 126, "oomguard-init: /sbin/noexec: permission denied"},
		{"missing-in-path", 127, "oomguard-init: missing-in-path: no such file or directory"},
	} {
		res := shimContainer(t, shim, "--", tc.target)
		if res.ExitCode != tc.code || !strings.Contains(res.Stderr, tc.msg) {
			t.Errorf("%s: exit %d stderr %q; want %d and %q", tc.target, res.ExitCode, res.Stderr, tc.code, tc.msg)
		}
	}
}

// make build must give identical bytes every time, for both architectures
// the image patcher embeds.
func TestE2EShimReproducibleBuild(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		a := buildShim(t, arch, "")
		b := buildShim(t, arch, t.TempDir()) // a cold cache: everything rebuilt
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two builds differ (%d and %d bytes)", arch, len(a), len(b))
		}
	}
}
