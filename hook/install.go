package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/atomicfile"
)

// DefaultHooksDir is where CRI-O and podman read hook definitions.
const DefaultHooksDir = "/etc/containers/oci/hooks.d"

const hookFileName = "oomguard.json"

// hooksDFile is the hooks.d schema, version 1.0.0 (containers/common pkg/hooks).
type hooksDFile struct {
	Version string     `json:"version"`
	Hook    hooksDHook `json:"hook"`
	When    hooksDWhen `json:"when"`
	Stages  []string   `json:"stages"`
}

type hooksDHook struct {
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
}

type hooksDWhen struct {
	Always bool `json:"always"`
}

func cmdInstall(args []string, stdout, stderr io.Writer, printOnly bool) int {
	name := "install"
	if printOnly {
		name = "print-config"
	}
	fs := flag.NewFlagSet("oomguard-hook "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	hooksDir := fs.String("hooks-dir", DefaultHooksDir, "hooks.d directory to write "+hookFileName+" into")
	hookPath := fs.String("hook-path", "", "absolute path of the oomguard-hook binary the runtime runs (default: this binary)")
	cfgPath := fs.String("config", "", "configuration file the hook reads (default $OOMGUARD_CONFIG or "+config.DefaultPath+")")
	stage := fs.String("stage", "createRuntime", "OCI hook stage: createRuntime, or prestart for runtimes without it")
	dryRun := fs.Bool("dry-run", false, "show what would change without writing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oomguard-hook %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	if *stage != "createRuntime" && *stage != "prestart" {
		fmt.Fprintf(stderr, "oomguard-hook %s: --stage %q: want createRuntime or prestart (the container's pid must exist and its process must not have started)\n", name, *stage)
		return 2
	}
	path := *hookPath
	if path == "" {
		exe, err := os.Executable()
		if err == nil {
			exe, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			fmt.Fprintf(stderr, "oomguard-hook %s: cannot find this binary's path (%v): pass --hook-path\n", name, err)
			return 1
		}
		path = exe
	}
	if !filepath.IsAbs(path) {
		fmt.Fprintf(stderr, "oomguard-hook %s: --hook-path %q must be absolute: runtimes run hooks by absolute path\n", name, path)
		return 2
	}
	cfg, err := filepath.Abs(config.Path(*cfgPath))
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-hook %s: %v\n", name, err)
		return 1
	}
	doc, err := hookJSON(path, cfg, *stage)
	if err != nil {
		fmt.Fprintf(stderr, "oomguard-hook %s: %v\n", name, err)
		return 1
	}
	if printOnly {
		stdout.Write(doc)
		return 0
	}
	target := filepath.Join(*hooksDir, hookFileName)
	old, err := os.ReadFile(target)
	switch {
	case err == nil && bytes.Equal(old, doc):
		fmt.Fprintf(stdout, "unchanged %s\n", target)
		return 0
	case *dryRun:
		fmt.Fprintf(stdout, "would write %s:\n%s", target, doc)
		return 0
	}
	if err := atomicfile.Write(target, doc, 0o644); err != nil {
		fmt.Fprintf(stderr, "oomguard-hook install: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", target)
	return 0
}

func hookJSON(path, cfg, stage string) ([]byte, error) {
	f := hooksDFile{
		Version: "1.0.0",
		Hook:    hooksDHook{Path: path, Args: []string{"oomguard-hook", "--config", cfg}},
		When:    hooksDWhen{Always: true},
		Stages:  []string{stage},
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
