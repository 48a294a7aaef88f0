// Package testbin builds oomguard's programs for tests and benchmarks the way
// make build does (scripts/gobuild), so what a test runs is what ships.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RepoRoot is the directory of the main module's go.mod, or the directory
// RootEnv names.
func RepoRoot() (string, error) {
	if dir := os.Getenv(RootEnv); dir != "" { // the bench kit: the repository's layout, no go.mod
		return filepath.Abs(dir)
	}
	// The directory above that holds go.mod, as go env GOMOD finds it (go
	// need not be installed: the benchmarks run where it is not).
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/oomguard/oomguard\n") {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("not inside the oomguard module")
		}
		dir = up
	}
}

// Build builds pkg (a package path relative to the repository, such as
// ./cmd/oomguard-hook, or a file) into dir/name and returns its path.
func Build(dir, name, pkg string, env ...string) (string, error) {
	if dir := os.Getenv(PrebuiltEnv); dir != "" { // a machine without Go
		return filepath.Join(dir, name), nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	if !filepath.IsAbs(out) {
		if out, err = filepath.Abs(out); err != nil {
			return "", err
		}
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "gobuild"), out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v: %s", pkg, err, b)
	}
	return out, nil
}

// PrebuiltEnv names a directory whose programs Build returns instead of
// building them (by name): for a machine without Go, where they were built
// beforehand.
const PrebuiltEnv = "OOMGUARD_PREBUILT"

// RootEnv names a directory laid out as the repository is (bin/, build/,
// deploy/) that RepoRoot returns without looking for go.mod: the unpacked
// bench kit (make bench-kit), which holds the files the benchmarks read
// and the programs they run, and no sources.
const RootEnv = "OOMGUARD_REPO_ROOT"

// Program builds ./cmd/name into dir.
func Program(dir, name string) (string, error) { return Build(dir, name, "./cmd/"+name) }

// ShippedConfig is deploy/config.toml with the hook logging to logFile, as
// the tests and benchmarks that install the hook run it.
func ShippedConfig(logFile string) ([]byte, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "config.toml"))
	if err != nil {
		return nil, err
	}
	return []byte(strings.Replace(string(b), `file = "/var/log/oomguard-hook.log"`, fmt.Sprintf("file = %q", logFile), 1)), nil
}

// Component is the real component make components built: BIN of
// build/components/NAME (the directory itself when bin is ""), or an error
// that says to build it.
func Component(name, bin string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "build", "components", name, bin)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run make components", p)
	}
	return p, nil
}

// ComponentFor is Component for a test, which fails when it is missing.
func ComponentFor(t testing.TB, name, bin string) string {
	t.Helper()
	p, err := Component(name, bin)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Chart is the repository's chart rendered by the real helm (`helm template`
// of release oomguard in namespace, with args), for a test, which fails
// when helm does.
func Chart(t testing.TB, namespace string, args ...string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := ComponentFor(t, "helm", "helm")
	out, err := exec.Command(helm, append([]string{"template", "oomguard", filepath.Join(root, "deploy", "helm", "oomguard"), "--namespace", namespace}, args...)...).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("helm template %v: %s", args, msg)
	}
	return string(out)
}
