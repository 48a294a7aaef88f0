package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/internal/safeio"
)

type usageError struct{ error }

// targets are the tags to patch, and how many tags of artifacts (signatures,
// attestations) --repo left out.
func targets(ctx context.Context, f flags, tr *imagepatch.Transport, refs []string, nameOpts []name.Option, ropts []remote.Option) (out []name.Tag, artifacts int, err error) {
	defer func() {
		for _, t := range out {
			tr.Allow(t.RegistryStr())
		}
	}()
	for _, r := range refs {
		t, err := imagepatch.ParseTag(r, nameOpts...)
		if err != nil {
			return nil, 0, usageError{err}
		}
		out = append(out, t)
	}
	if f.fromFile != "" {
		file, err := os.Open(f.fromFile)
		if err != nil {
			return nil, 0, usageError{fmt.Errorf("--from-file: %w", err)}
		}
		defer file.Close()
		ts, err := imagepatch.ReadRefs(file, nameOpts...)
		if err != nil {
			return nil, 0, usageError{fmt.Errorf("--from-file %s: %w", f.fromFile, err)}
		}
		out = append(out, ts...)
	}
	if (f.tags != "" || f.tagRegex != "") && f.repo == "" {
		return nil, 0, usageError{fmt.Errorf("--tags and --tag-regex select tags of --repo: give --repo")}
	}
	if f.repo != "" {
		repo, err := name.NewRepository(f.repo, nameOpts...)
		if err != nil {
			return nil, 0, usageError{fmt.Errorf("--repo %q: %w", f.repo, err)}
		}
		tr.Allow(repo.RegistryStr())
		sel := imagepatch.Selector{}
		if f.tags != "" {
			sel.Globs = strings.Split(f.tags, ",")
		}
		if f.tagRegex != "" {
			re, err := regexp.Compile(f.tagRegex)
			if err != nil {
				return nil, 0, usageError{fmt.Errorf("--tag-regex: %w", err)}
			}
			sel.Regexp = re
		}
		ts, n, err := sel.Select(ctx, repo, ropts...)
		if err != nil {
			return nil, 0, err
		}
		out, artifacts = append(out, ts...), n
	}
	if len(out) == 0 && artifacts == 0 {
		return nil, 0, usageError{fmt.Errorf("no targets: give REF..., --from-file or --repo")}
	}
	return out, artifacts, nil
}

// newPatcher makes the patcher and the registry options the flags ask for.
func newPatcher(f flags) (*imagepatch.Patcher, *imagepatch.Transport, []name.Option, []remote.Option, error) {
	spec := imagepatch.ShimSpec()
	if f.spec != "" {
		s, err := imagepatch.LoadSpec(f.spec)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		spec = s
	}
	var nameOpts []name.Option
	if f.insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	topts := imagepatch.TransportOptions{RequestTimeout: f.requestTimeout, AllowPrivate: f.allowPrivate}
	if f.caFile != "" {
		pool, err := imagepatch.LoadCAFile(f.caFile)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("--ca-file: %w", err)
		}
		topts.RootCAs = pool
	}
	tr := imagepatch.NewTransport(topts)
	// A 429 (and a 503 with Retry-After) is the transport's: it waits as
	// the registry asks, every job together. These retries are for the
	// other failures a retry may mend.
	backoff := []remote.Option{remote.WithRetryBackoff(remote.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: max(f.retries, 1)}),
		remote.WithRetryStatusCodes(http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout)}
	ropts := append([]remote.Option{remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, backoff...)
	popts := []imagepatch.Option{imagepatch.WithTagTemplate(f.template), imagepatch.WithJobs(f.jobs),
		imagepatch.WithRegistry(tr, authn.DefaultKeychain), imagepatch.WithRemoteOptions(backoff...)}
	if f.signKey != "" {
		b, err := safeio.ReadFile(f.signKey, 1<<20)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("--sign-key: %w", err)
		}
		s, err := imagepatch.LoadSigner(b, []byte(os.Getenv("COSIGN_PASSWORD")))
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("--sign-key %s: %w", f.signKey, err)
		}
		popts = append(popts, imagepatch.WithSigner(s))
	}
	format, err := imagepatch.ParseSignatureFormat(f.signatureFormat)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("--signature-format: %w", err)
	}
	if format != imagepatch.FormatSig && f.signKey == "" {
		return nil, nil, nil, nil, fmt.Errorf("--signature-format %s needs --sign-key", format)
	}
	popts = append(popts, imagepatch.WithSignatureFormat(format))
	p, err := imagepatch.New(spec, popts...)
	return p, tr, nameOpts, ropts, err
}
