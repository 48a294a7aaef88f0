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
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

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
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	spec := imagepatch.ShimSpec()
	if f.spec != "" {
		s, err := imagepatch.LoadSpec(f.spec)
		if err != nil {
			fmt.Fprintf(stderr, "imagepatch: %v\n", err)
			return 2
		}
		spec = s
	}
	var nameOpts []name.Option
	if f.insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ropts := []remote.Option{
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithRetryBackoff(remote.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: max(f.retries, 1)}),
	}
	p, err := imagepatch.New(spec, imagepatch.WithTagTemplate(f.template), imagepatch.WithJobs(f.jobs), imagepatch.WithRemoteOptions(ropts...))
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
	var done atomic.Int64
	progress := newProgress(stderr, len(srcs))
	results := p.Run(ctx, srcs, cmd == "apply", func(r imagepatch.Result) {
		progress.update(int(done.Add(1)))
		if r.Action == imagepatch.ActionFailed {
			log.Warn("failed", "source", r.Source, "err", r.Error)
		}
	})
	progress.finish()
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(results)
	} else {
		summary(stdout, results, cmd == "plan")
	}
	for _, r := range results {
		if r.Action == imagepatch.ActionFailed || r.Action == imagepatch.ActionRefused {
			return 1
		}
	}
	return 0
}

type usageError struct{ error }

// parseInterspersed lets flags come before, between and after references.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func targets(ctx context.Context, f flags, refs []string, nameOpts []name.Option, ropts []remote.Option) ([]name.Tag, error) {
	var out []name.Tag
	for _, r := range refs {
		t, err := imagepatch.ParseTag(r, nameOpts...)
		if err != nil {
			return nil, usageError{err}
		}
		out = append(out, t)
	}
	if f.fromFile != "" {
		file, err := os.Open(f.fromFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("--from-file: %w", err)}
		}
		defer file.Close()
		ts, err := imagepatch.ReadRefs(file, nameOpts...)
		if err != nil {
			return nil, usageError{fmt.Errorf("--from-file %s: %w", f.fromFile, err)}
		}
		out = append(out, ts...)
	}
	if (f.tags != "" || f.tagRegex != "") && f.repo == "" {
		return nil, usageError{fmt.Errorf("--tags and --tag-regex select tags of --repo: give --repo")}
	}
	if f.repo != "" {
		repo, err := name.NewRepository(f.repo, nameOpts...)
		if err != nil {
			return nil, usageError{fmt.Errorf("--repo %q: %w", f.repo, err)}
		}
		sel := imagepatch.Selector{}
		if f.tags != "" {
			sel.Globs = strings.Split(f.tags, ",")
		}
		if f.tagRegex != "" {
			re, err := regexp.Compile(f.tagRegex)
			if err != nil {
				return nil, usageError{fmt.Errorf("--tag-regex: %w", err)}
			}
			sel.Regexp = re
		}
		ts, err := sel.Tags(ctx, repo, ropts...)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	if len(out) == 0 {
		return nil, usageError{fmt.Errorf("no targets: give REF..., --from-file or --repo")}
	}
	return out, nil
}

func resolve(ctx context.Context, p *imagepatch.Patcher, ref string, nameOpts []name.Option, stdout, stderr io.Writer) int {
	src, err := imagepatch.ParseTag(ref, nameOpts...)
	if err != nil {
		fmt.Fprintf(stderr, "imagepatch resolve: %v\n", err)
		return 2
	}
	r := p.Apply(ctx, src)
	switch r.Action {
	case imagepatch.ActionPush, imagepatch.ActionUnchanged:
		dst, _ := name.NewTag(r.Destination, nameOpts...)
		fmt.Fprintln(stdout, dst.Context().Digest(r.Digest).String())
		return 0
	case imagepatch.ActionSkipped:
		fmt.Fprintln(stdout, ref) // already the patched image
		return 0
	}
	fmt.Fprintf(stderr, "imagepatch resolve %s: %s: %s\n", ref, r.Action, r.Error)
	return 1
}

func summary(w io.Writer, results []imagepatch.Result, plan bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tDESTINATION\tACTION\tDIGEST\tNOTE")
	counts := map[imagepatch.Action]int{}
	for _, r := range results {
		counts[r.Action]++
		action := string(r.Action)
		if plan && r.Action == imagepatch.ActionPush {
			action = "would push"
		}
		note := r.Error
		if r.Upgraded {
			note = strings.TrimSpace("from recorded base " + r.Base + " " + note)
		}
		if len(r.Dropped) > 0 {
			note = strings.TrimSpace(note + " dropped: " + strings.Join(r.Dropped, ", "))
		}
		digest := r.Digest
		if len(digest) > 19 {
			digest = digest[:19]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Source, r.Destination, action, digest, note)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d tags: %d push, %d unchanged, %d skipped, %d refused, %d failed\n", len(results),
		counts[imagepatch.ActionPush], counts[imagepatch.ActionUnchanged], counts[imagepatch.ActionSkipped],
		counts[imagepatch.ActionRefused], counts[imagepatch.ActionFailed])
}

// progress draws a one-line bar on a terminal, and nothing elsewhere.
type progress struct {
	w     io.Writer
	total int
	tty   bool
}

func newProgress(w io.Writer, total int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, total: total, tty: tty}
}

func (p *progress) update(done int) {
	if !p.tty || p.total == 0 {
		return
	}
	const width = 30
	n := done * width / p.total
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d", strings.Repeat("#", n), strings.Repeat(" ", width-n), done, p.total)
}

func (p *progress) finish() {
	if p.tty && p.total > 0 {
		fmt.Fprintln(p.w)
	}
}
