package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/oomguard/oomguard/imagepatch"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/escape"
)

// patch plans or applies srcs, shows progress on a terminal, reports the
// results and returns the exit status.
func patch(ctx context.Context, p *imagepatch.Patcher, srcs []name.Tag, apply, asJSON bool, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var done atomic.Int64
	progress := newProgress(stderr, len(srcs))
	results := p.Run(ctx, srcs, apply, func(r imagepatch.Result) {
		progress.update(int(done.Add(1)))
		if r.Action == imagepatch.ActionFailed {
			log.Warn("failed", "source", r.Source, "err", r.Error)
		}
	})
	progress.finish()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(results)
	} else {
		summary(stdout, results, !apply)
	}
	for _, r := range results {
		if r.Action == imagepatch.ActionFailed || r.Action == imagepatch.ActionRefused {
			return 1
		}
	}
	return 0
}

func resolve(ctx context.Context, p *imagepatch.Patcher, ref string, nameOpts []name.Option, stdout, stderr io.Writer) int {
	var r imagepatch.Result
	if d, err := name.NewDigest(ref, nameOpts...); err == nil {
		// By digest: named sha256-HEX in its destination, as the webhook names it.
		r = p.ApplyRef(ctx, d, imagepatch.DigestTag(d))
	} else {
		src, err := imagepatch.ParseTag(ref, nameOpts...)
		if err != nil {
			fmt.Fprintf(stderr, "imagepatch resolve: %v\n", err)
			return 2
		}
		r = p.Apply(ctx, src)
	}
	switch r.Action {
	case imagepatch.ActionPush, imagepatch.ActionUnchanged:
		if r.Note != "" {
			fmt.Fprintf(stderr, "imagepatch resolve %s: %s\n", ref, escape.Terminal(oneLine(r.Note)))
		}
		dst, _ := name.NewTag(r.Destination, nameOpts...)
		fmt.Fprintln(stdout, dst.Context().Digest(r.Digest).String())
		return 0
	case imagepatch.ActionSkipped:
		fmt.Fprintf(stderr, "imagepatch resolve %s: left as it is: %s\n", ref, escape.Terminal(oneLine(r.Error)))
		fmt.Fprintln(stdout, ref) // already the patched image, or one the patch is not for
		return 0
	}
	fmt.Fprintf(stderr, "imagepatch resolve %s: %s: %s\n", ref, r.Action, escape.Terminal(oneLine(r.Error)))
	return 1
}

// oneLine is text for one line of a table: a registry's multi-line error
// as one line, not the literal \n the escape would make of it.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

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
		note := strings.TrimSpace(r.Error + " " + r.Note)
		if r.Upgraded {
			note = strings.TrimSpace("from recorded base " + r.Base + " " + note)
		}
		if len(r.Kept) > 0 {
			note = strings.TrimSpace(note + " kept unpatched: " + strings.Join(r.Kept, ", "))
		}
		if len(r.Dropped) > 0 {
			note = strings.TrimSpace(note + " dropped: " + strings.Join(r.Dropped, ", "))
		}
		digest := r.Digest
		if len(digest) > 19 {
			digest = digest[:19]
		}
		// A registry's errors are its own text: escaped, as names from a file are.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", escape.Terminal(r.Source), escape.Terminal(r.Destination), action, escape.Terminal(digest), escape.Terminal(oneLine(note)))
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
	return &progress{w: w, total: total, tty: cli.IsTerminal(w)}
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
