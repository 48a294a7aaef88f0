// imagepatch layers a patch (by default the oomguard-init shim) onto existing
// image tags in a registry, under new tags, without rebuilding or downloading
// base layers, and without overwriting anything.
//
//	imagepatch plan  [flags] [REF...]   what would happen to every tag
//	imagepatch apply [flags] [REF...]   do it
//	imagepatch resolve [flags] IMAGE    print the patched reference, patching on demand
//	imagepatch webhook [flags]          serve the admission webhook that runs pods on patched images
//	imagepatch spec                     print the built-in spec
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	// Mozilla's roots, for where the machine has none: public registries
	// (ghcr.io, Docker Hub, ECR) are then verified as anywhere else.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Main(ctx, program(), args, cli.IO{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr})
}

type flags struct {
	spec, repo, tags, tagRegex, fromFile, template, caFile, signKey, signatureFormat string
	jobs, retries                                                                    int
	insecure, json, allowPrivate                                                     bool
	timeout, requestTimeout                                                          time.Duration
}

const targetsHelp = "Targets: REF... (repo:tag), --from-file FILE (one a line), or --repo REPO with\n" +
	"--tags GLOB[,GLOB] and/or --tag-regex RE (every tag when neither is given).\n" +
	"Exit status: 0 all succeeded, 1 some failed or were refused (a re-run finishes\n" +
	"the failed), 2 usage errors."

func program() *cli.Command {
	patchCmd := func(name, help string) *cli.Command {
		var f flags
		c := &cli.Command{Name: name, Help: help, Args: "[REF...]", MaxArgs: -1, Interspersed: true, Flags: patchFlags(&f, true, 30*time.Minute, runTimeout)}
		c.Run = func(ctx context.Context, refs []string, s cli.IO) int {
			p, tr, nameOpts, ropts, err := newPatcher(f)
			if err != nil {
				return cli.Usagef(s.Stderr, c, "%v", err)
			}
			ctx, cancel := context.WithTimeout(ctx, f.timeout)
			defer cancel()
			srcs, artifacts, err := targets(ctx, f, tr, refs, nameOpts, ropts)
			if err != nil {
				if _, usageErr := err.(usageError); usageErr {
					return cli.Usagef(s.Stderr, c, "%v", err)
				}
				fmt.Fprintf(s.Stderr, "imagepatch %s: %v\n", name, err)
				return 1
			}
			if artifacts > 0 {
				fmt.Fprintf(s.Stderr, "imagepatch %s: left out %d tags of signatures, attestations and referrers (sha256-HEX, sha256-HEX.sig/.att/.sbom)\n", name, artifacts)
			}
			return patch(ctx, p, srcs, name == "apply", f.json, s.Stdout, s.Stderr)
		}
		return c
	}
	var rf flags
	resolveCmd := &cli.Command{Name: "resolve", Help: "Print the patched reference (repo@digest), patching on demand.",
		Args: "IMAGE", MinArgs: 1, MaxArgs: 1, Interspersed: true, Flags: patchFlags(&rf, false, 30*time.Minute, runTimeout)}
	resolveCmd.Run = func(ctx context.Context, refs []string, s cli.IO) int {
		p, tr, nameOpts, _, err := newPatcher(rf)
		if err != nil {
			return cli.Usagef(s.Stderr, resolveCmd, "%v", err)
		}
		if r, err := name.ParseReference(refs[0], nameOpts...); err == nil {
			tr.Allow(r.Context().RegistryStr())
		}
		ctx, cancel := context.WithTimeout(ctx, rf.timeout)
		defer cancel()
		return resolve(ctx, p, refs[0], nameOpts, s.Stdout, s.Stderr)
	}
	return &cli.Command{
		Name:    "imagepatch",
		Summary: "layer a patch onto existing image tags, under new tags.\n\n" + targetsHelp,
		Commands: []*cli.Command{
			patchCmd("plan", "Show what would happen to every selected tag."),
			patchCmd("apply", "Patch them and push the results."),
			resolveCmd,
			webhookCmd(),
			{Name: "spec", Help: "Print the built-in spec (the oomguard-init shim).", Run: func(_ context.Context, _ []string, s cli.IO) int {
				s.Stdout.Write(imagepatch.ShimSpecTOML())
				return 0
			}},
		},
	}
}

const runTimeout = "give up on the whole run after this long"

func patchFlags(f *flags, selecting bool, timeout time.Duration, timeoutHelp string) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.StringVar(&f.spec, "spec", "", "patch spec TOML `FILE` (default: the built-in oomguard-init shim)")
		if selecting {
			fs.StringVar(&f.repo, "repo", "", "`REPO`sitory whose tags to select")
			fs.StringVar(&f.tags, "tags", "", "comma-separated tag `GLOBS`, with --repo")
			fs.StringVar(&f.tagRegex, "tag-regex", "", "tag regular expression `RE`, with --repo")
			fs.StringVar(&f.fromFile, "from-file", "", "`FILE` of references, one a line")
			fs.IntVar(&f.jobs, "jobs", 8, "tags patched at once")
			fs.BoolVar(&f.json, "json", false, "results as JSON on stdout")
		} else {
			f.jobs = 1
		}
		fs.StringVar(&f.template, "tag-template", imagepatch.DefaultTagTemplate, "destination tag `TEMPLATE`; fields .Tag .Patch .Version .Repo")
		fs.IntVar(&f.retries, "retries", 4, "attempts per registry request on 5xx, with backoff (a 429 waits as the registry asks, every job together)")
		fs.StringVar(&f.signKey, "sign-key", "", "sign every result with the private key in `FILE` (cosign generate-key-pair's, its password in $COSIGN_PASSWORD, or PKCS#8 PEM), as cosign sign --key does: cosign verify --key verifies")
		fs.StringVar(&f.signatureFormat, "signature-format", string(imagepatch.FormatSig), "with --sign-key, how signatures are stored: `sig` (cosign's sha256-HEX.sig tags) or bundle (a Sigstore bundle as an OCI referrer, cosign 3's format: cosign verify --new-bundle-format)")
		fs.StringVar(&f.caFile, "ca-file", "", "PEM `FILE` of CAs a registry's certificate may be signed by (a private CA), besides Mozilla's roots and the system's")
		fs.BoolVar(&f.insecure, "insecure", false, "allow plain-HTTP registries")
		fs.DurationVar(&f.timeout, "timeout", timeout, timeoutHelp)
		fs.DurationVar(&f.requestTimeout, "request-timeout", imagepatch.DefaultTransportOptions.RequestTimeout, "give up on one registry request (its answer included) after this long")
		fs.BoolVar(&f.allowPrivate, "allow-private-token-hosts", false, "send credentials to a token server at a private, loopback or link-local address other than the registry's own (an in-cluster one)")
	}
}
