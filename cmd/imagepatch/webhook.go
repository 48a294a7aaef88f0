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
	"github.com/oomguard/oomguard/internal/kubeapi"
)

type webhookFlags struct {
	listen, metrics, cert, key, images, skip string
	deadline, tagTTL                         time.Duration
	limits                                   imagepatch.Limits
	clientCA, clientNames                    string

	secret, config, hosts, apiServer, apiToken, apiCA string
	validity                                          time.Duration
}

func webhookCmd() *cli.Command {
	var f flags
	var w webhookFlags
	c := &cli.Command{Name: "webhook", Help: "Serve a mutating admission webhook that runs pods on their patched images,\n" +
		"patching on demand (never refusing a pod: what is not patched in time runs as it is).",
		Flags: func(fs *flag.FlagSet) {
			patchFlags(&f, false, 10*time.Minute, "give up on one patch on demand after this long")(fs)
			fs.StringVar(&w.listen, "listen", ":8443", "serve HTTPS admission reviews at `ADDR` (/mutate)")
			fs.StringVar(&w.metrics, "metrics-address", ":9742", "serve /metrics and /healthz over HTTP at `ADDR` (\"\": none)")
			fs.StringVar(&w.cert, "tls-cert-file", "", "serving certificate `FILE` (PEM), read again when it changes")
			fs.StringVar(&w.key, "tls-key-file", "", "its private key `FILE` (PEM)")
			fs.StringVar(&w.secret, "tls-secret", "", "instead of the files: make a CA and a serving certificate, keep them in the Secret `NAMESPACE/NAME` (shared by the replicas), renew them in the last third of their life")
			fs.StringVar(&w.config, "webhook-configuration", "", "with --tls-secret: the MutatingWebhookConfiguration `NAME` whose caBundle gets the CA (and owns the Secret)")
			fs.StringVar(&w.hosts, "tls-hosts", "", "with --tls-secret: comma-separated DNS `NAMES` or IPs the serving certificate names (the Service's: NAME.NAMESPACE.svc)")
			fs.DurationVar(&w.validity, "cert-validity", 365*24*time.Hour, "with --tls-secret: how long a serving certificate is valid (the CA: ten times that)")
			fs.StringVar(&w.apiServer, "api-server", "", "with --tls-secret: the API server's `URL` (default: the pod's KUBERNETES_SERVICE_HOST)")
			fs.StringVar(&w.apiToken, "api-token-file", kubeapi.ServiceAccount+"/token", "with --tls-secret: the bearer token `FILE` for the API server")
			fs.StringVar(&w.apiCA, "api-ca-file", kubeapi.ServiceAccount+"/ca.crt", "with --tls-secret: the API server's CA `FILE`")
			fs.StringVar(&w.images, "images", "", "comma-separated repository `GLOBS` whose images pods run patched (registry.example/base/*)")
			fs.StringVar(&w.skip, "skip-namespaces", os.Getenv("POD_NAMESPACE"), "comma-separated `NAMESPACES` never mutated besides kube-system (default: $POD_NAMESPACE, its own)")
			fs.DurationVar(&w.deadline, "deadline", 5*time.Second, "answer a review within this long; images not patched by then run unpatched and are patched in the background (keep it below the webhook's timeoutSeconds)")
			fs.DurationVar(&w.tagTTL, "tag-ttl", time.Minute, "trust a tag's digest this long before looking it up again")
			d := imagepatch.DefaultLimits
			fs.IntVar(&w.limits.Concurrent, "max-concurrent-patches", d.Concurrent, "patch at most `N` images at once; a review of another new image gets it unpatched at once, with a warning")
			fs.IntVar(&w.limits.PerMinute, "max-patches-per-minute", d.PerMinute, "start at most `N` patches a minute; beyond that, as above")
			fs.IntVar(&w.limits.PerRepository, "max-patches-per-repository", d.PerRepository, "start at most `N` patches a minute of images of one repository; beyond that, as above")
			fs.IntVar(&w.limits.Cached, "cache-size", d.Cached, "remember at most `N` tags, results and failures each (the least recently used go first)")
			fs.StringVar(&w.clientCA, "client-ca", "", "require of every caller a client certificate this CA bundle `FILE` signed (the API server's, from its AdmissionConfiguration's kubeconfig); read again when it changes")
			fs.StringVar(&w.clientNames, "client-names", "", "with --client-ca: accept only a certificate whose Common Name or a DNS name is one of these comma-separated `NAMES`")
		}}
	c.Run = func(ctx context.Context, _ []string, s cli.IO) int {
		if w.images == "" {
			return cli.Usagef(s.Stderr, c, "--images is required")
		}
		if (w.secret == "") == (w.cert == "" || w.key == "") {
			return cli.Usagef(s.Stderr, c, "give either --tls-cert-file and --tls-key-file, or --tls-secret")
		}
		secretNS, secretName, _ := strings.Cut(w.secret, "/")
		if w.secret != "" && (secretNS == "" || secretName == "" || w.config == "" || w.hosts == "" || w.validity < 10*time.Second) {
			return cli.Usagef(s.Stderr, c, "--tls-secret takes NAMESPACE/NAME and needs --webhook-configuration, --tls-hosts and a --cert-validity of 10s or more")
		}
		if l := w.limits; l.Concurrent < 1 || l.PerMinute < 1 || l.PerRepository < 1 || l.Cached < 1 {
			return cli.Usagef(s.Stderr, c, "--max-concurrent-patches, --max-patches-per-minute, --max-patches-per-repository and --cache-size take 1 or more")
		}
		if w.clientNames != "" && w.clientCA == "" {
			return cli.Usagef(s.Stderr, c, "--client-names needs --client-ca")
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
		r.TagTTL, r.PatchTimeout = w.tagTTL, f.timeout
		w.limits.Lookups = imagepatch.DefaultLimits.Lookups
		r.Limits = w.limits
		r.Finished = func(res imagepatch.Resolution, d time.Duration) {
			m.Finished(res, d)
			log.Info("patch on demand finished", "source", res.SourceDigest, "state", res.State, "action", res.Action, "patched", res.Patched,
				"took", d.Round(time.Millisecond), "note", res.Note, "err", res.Error)
		}
		m.WatchCaches(r.Sizes)
		h := admission.New(admission.Config{Images: globs, Skip: splitList(w.skip), Deadline: w.deadline,
			Prefix: p.Spec().Config.EntrypointPrefix, InitPrefix: p.Spec().Config.InitEntrypointPrefix, NameOptions: nameOpts}, r, log, m)
		var clients *admission.ClientAuth
		if w.clientCA != "" {
			if clients, err = admission.NewClientAuth(w.clientCA, splitList(w.clientNames), m); err != nil {
				fmt.Fprintf(s.Stderr, "imagepatch webhook: %v\n", err)
				return 1
			}
		}
		var certs admission.Certificates
		if w.secret == "" {
			if certs, err = admission.NewCertFiles(w.cert, w.key, m); err != nil {
				fmt.Fprintf(s.Stderr, "imagepatch webhook: %v\n", err)
				return 1
			}
		} else {
			api, err := kubeapi.FromFiles(w.apiServer, w.apiToken, w.apiCA)
			if err != nil {
				fmt.Fprintf(s.Stderr, "imagepatch webhook: %v\n", err)
				return 1
			}
			ss := &admission.SelfSigned{API: api, Namespace: secretNS, Secret: secretName, Webhook: w.config,
				Hosts: splitList(w.hosts), Validity: w.validity, Log: log, Metrics: m}
			go ss.Run(ctx)
			certs = ss
		}
		srv := &admission.Server{Addr: w.listen, MetricsAddr: w.metrics, Certs: certs, Clients: clients, Handler: h, Log: log}
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
