// imagepatch layers a patch (by default the oomguard-init shim) onto existing
// image tags in a registry, under new tags, without rebuilding or downloading
// base layers, and without overwriting anything.
//
//	imagepatch plan  [flags] [REF...]   what would happen to every tag
//	imagepatch apply [flags] [REF...]   do it
//	imagepatch resolve [flags] IMAGE    print the patched reference, patching on demand
//	imagepatch spec                     print the built-in spec
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/oomguard/oomguard/internal/version"

	"github.com/oomguard/oomguard/imagepatch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `imagepatch: layer a patch onto existing image tags, under new tags.

Usage:
  imagepatch plan    [flags] [REF...]   show what would happen to every selected tag
  imagepatch apply   [flags] [REF...]   patch them and push the results
  imagepatch resolve [flags] IMAGE      print the patched reference, patching on demand
  imagepatch spec                       print the built-in spec (the oomguard-init shim)

Targets: REF... (repo:tag), --from-file FILE (one a line), or --repo REPO with
--tags GLOB[,GLOB] and/or --tag-regex RE (every tag when neither is given).

Exit status: 0 all succeeded, 1 some failed or were refused (a re-run finishes
the failed), 2 usage errors.
`

type flags struct {
	spec, repo, tags, tagRegex, fromFile, template string
	jobs, retries                                  int
	insecure, json                                 bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if version.Asked(args) {
		fmt.Fprintln(stdout, version.String("imagepatch"))
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	if cmd == "spec" {
		stdout.Write(imagepatch.ShimSpecTOML())
		return 0
	}
	if cmd != "plan" && cmd != "apply" && cmd != "resolve" {
		fmt.Fprintf(stderr, "imagepatch: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var f flags
	fs := flag.NewFlagSet("imagepatch "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.spec, "spec", "", "patch spec TOML (default: the built-in oomguard-init shim)")
	fs.StringVar(&f.repo, "repo", "", "repository whose tags to select")
	fs.StringVar(&f.tags, "tags", "", "comma-separated tag globs, with --repo")
	fs.StringVar(&f.tagRegex, "tag-regex", "", "tag regular expression, with --repo")
	fs.StringVar(&f.fromFile, "from-file", "", "file of references, one a line")
	fs.StringVar(&f.template, "tag-template", imagepatch.DefaultTagTemplate, "destination tag; fields .Tag .Patch .Version .Repo")
	fs.IntVar(&f.jobs, "jobs", 8, "tags patched at once")
	fs.IntVar(&f.retries, "retries", 4, "attempts per registry request on 429 and 5xx, with backoff")
	fs.BoolVar(&f.insecure, "insecure", false, "allow plain-HTTP registries")
	fs.BoolVar(&f.json, "json", false, "results as JSON on stdout")
	positional, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return 2
	}

	p, nameOpts, ropts, err := newPatcher(f)
	if err != nil {
		fmt.Fprintf(stderr, "imagepatch: %v\n", err)
		return 2
	}
	if cmd == "resolve" {
		if len(positional) != 1 {
			fmt.Fprintln(stderr, "imagepatch resolve: give exactly one IMAGE")
			return 2
		}
		return resolve(ctx, p, positional[0], nameOpts, stdout, stderr)
	}
	srcs, err := targets(ctx, f, positional, nameOpts, ropts)
	if err != nil {
		fmt.Fprintf(stderr, "imagepatch %s: %v\n", cmd, err)
		if _, usageErr := err.(usageError); usageErr {
			return 2
		}
		return 1
	}
	return patch(ctx, p, srcs, cmd == "apply", f.json, stdout, stderr)
}
