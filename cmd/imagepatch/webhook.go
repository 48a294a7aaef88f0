package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/imagepatch/admission"
	"github.com/oomguard/oomguard/internal/cli"
)

type webhookFlags struct {
	listen, metrics, cert, key, images, skip string
	deadline, tagTTL                         time.Duration
}

func webhookCmd() *cli.Command {
	var f flags
	var w webhookFlags
	c := &cli.Command{Name: "webhook", Help: "Serve a mutating admission webhook that runs pods on their patched images,\n" +
		"patching on demand (never refusing a pod: what is not patched in time runs as it is).",
		Flags: func(fs *flag.FlagSet) {
			patchFlags(&f, false)(fs)
			fs.StringVar(&w.listen, "listen", ":8443", "serve HTTPS admission reviews at `ADDR` (/mutate)")
			fs.StringVar(&w.metrics, "metrics-address", ":8080", "serve /metrics and /healthz over HTTP at `ADDR` (\"\": none)")
			fs.StringVar(&w.cert, "tls-cert-file", "", "serving certificate `FILE` (PEM), read again when it changes")
			fs.StringVar(&w.key, "tls-key-file", "", "its private key `FILE` (PEM)")
			fs.StringVar(&w.images, "images", "", "comma-separated repository `GLOBS` whose images pods run patched (registry.example/base/*)")
			fs.StringVar(&w.skip, "skip-namespaces", os.Getenv("POD_NAMESPACE"), "comma-separated `NAMESPACES` never mutated besides kube-system (default: $POD_NAMESPACE, its own)")
			fs.DurationVar(&w.deadline, "deadline", 5*time.Second, "answer a review within this long; images not patched by then run unpatched and are patched in the background (keep it below the webhook's timeoutSeconds)")
			fs.DurationVar(&w.tagTTL, "tag-ttl", time.Minute, "trust a tag's digest this long before looking it up again")
		}}
	c.Run = func(ctx context.Context, _ []string, s cli.IO) int {
		if w.cert == "" || w.key == "" || w.images == "" {
			return cli.Usagef(s.Stderr, c, "--tls-cert-file, --tls-key-file and --images are required")
		}
		p, tr, nameOpts, _, err := newPatcher(f)
		if err != nil {
			return cli.Usagef(s.Stderr, c, "%v", err)
		}
		globs := splitList(w.images)
		for _, g := range globs {
			if host, _, ok := strings.Cut(g, "/"); ok && !strings.ContainsAny(host, "*?[") {
				tr.Allow(host)
			}
		}
		log := slog.New(slog.NewJSONHandler(s.Stderr, nil)).With("component", "imagepatch-webhook")
		m := admission.NewMetrics()
		r := imagepatch.NewResolver(p)
		r.TagTTL = w.tagTTL
		r.Finished = func(res imagepatch.Resolution, d time.Duration) {
			m.Finished(res, d)
			log.Info("patch on demand finished", "source", res.SourceDigest, "state", res.State, "action", res.Action, "patched", res.Patched,
				"took", d.Round(time.Millisecond), "err", res.Error)
		}
		h := admission.New(admission.Config{Images: globs, Skip: splitList(w.skip), Deadline: w.deadline,
			Prefix: p.Spec().Config.EntrypointPrefix, NameOptions: nameOpts}, r, log, m)
		srv := &admission.Server{Addr: w.listen, MetricsAddr: w.metrics, CertFile: w.cert, KeyFile: w.key, Handler: h, Log: log}
		if err := srv.Serve(ctx); err != nil {
			fmt.Fprintf(s.Stderr, "imagepatch webhook: %v\n", err)
			return 1
		}
		return 0
	}
	return c
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
