package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/oomguard/oomguard/imagepatch"
)

type usageError struct{ error }

func targets(ctx context.Context, f flags, tr *imagepatch.Transport, refs []string, nameOpts []name.Option, ropts []remote.Option) (out []name.Tag, err error) {
	defer func() {
		for _, t := range out {
			tr.Allow(t.RegistryStr())
		}
	}()
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
		tr.Allow(repo.RegistryStr())
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
	tr := imagepatch.NewTransport(imagepatch.TransportOptions{RequestTimeout: f.requestTimeout, AllowPrivate: f.allowPrivate})
	backoff := remote.WithRetryBackoff(remote.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: max(f.retries, 1)})
	ropts := []remote.Option{remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain), backoff}
	p, err := imagepatch.New(spec, imagepatch.WithTagTemplate(f.template), imagepatch.WithJobs(f.jobs),
		imagepatch.WithRegistry(tr, authn.DefaultKeychain), imagepatch.WithRemoteOptions(backoff))
	return p, tr, nameOpts, ropts, err
}
