package cli

import (
	"context"
	"flag"
	"strings"
	"testing"
)

// prog is a program with a run of its own and two subcommands.
func prog(ran *[]string) *Command {
	var v string
	return &Command{
		Name: "prog", Summary: "does things.", Help: "Run it.",
		Flags: func(fs *flag.FlagSet) { fs.StringVar(&v, "config", "", "the `FILE` to read") },
		Run: func(_ context.Context, args []string, _ IO) int {
			*ran = append(*ran, "prog "+v+" "+strings.Join(args, ","))
			return 0
		},
		Commands: []*Command{
			{Name: "install", Help: "Install it.", Flags: func(fs *flag.FlagSet) {
				fs.StringVar(&v, "runtime", "auto", "auto, containerd, crio or both")
				fs.Bool("dry-run", false, "change nothing")
			}, Run: func(_ context.Context, args []string, _ IO) int { *ran = append(*ran, "install "+v); return 3 }},
			{Name: "resolve", Help: "Resolve one.", Args: "IMAGE", MinArgs: 1, MaxArgs: 1, Interspersed: true,
				Flags: func(fs *flag.FlagSet) { fs.StringVar(&v, "spec", "", "a spec") },
				Run: func(_ context.Context, args []string, _ IO) int {
					*ran = append(*ran, "resolve "+v+" "+strings.Join(args, ","))
					return 0
				}},
		},
	}
}

func TestMain(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		code           int
		ran            string
		stdout, stderr string // substrings
	}{
		{args: nil, code: 0, ran: "prog  "},
		{args: []string{"--version"}, code: 0, stdout: "prog dev (commit unknown)"},
		{args: []string{"version"}, code: 0, stdout: "prog dev (commit unknown)"},
		{args: []string{"--help"}, code: 0, stdout: "prog install [flags]\n      Install it."},
		{args: []string{"-h"}, code: 0, stdout: "--runtime string\n        auto, containerd, crio or both (default auto)"},
		{args: []string{"help"}, code: 0, stdout: "prog resolve [flags] IMAGE"},
		{args: []string{"help", "install"}, code: 0, stdout: "Flags of prog install:"},
		{args: []string{"install", "--help"}, code: 0, stdout: "--dry-run\n        change nothing"},
		{args: []string{"--config", "x"}, code: 0, ran: "prog x "},
		{args: []string{"--bogus"}, code: 2, stderr: "prog: flag provided but not defined: -bogus\nRun 'prog --help' for usage."},
		{args: []string{"extra"}, code: 2, stderr: `prog: unexpected argument "extra"`},
		{args: []string{"install", "--runtime", "crio"}, code: 3, ran: "install crio"},
		{args: []string{"install", "x"}, code: 2, stderr: `prog install: unexpected argument "x"`},
		{args: []string{"install", "--runtime"}, code: 2, stderr: "flag needs an argument"},
		{args: []string{"resolve"}, code: 2, stderr: "want IMAGE, got 0 arguments"},
		{args: []string{"resolve", "a", "b"}, code: 2, stderr: "want IMAGE, got 2 arguments"},
		{args: []string{"resolve", "a", "--spec", "s"}, code: 0, ran: "resolve s a"},
	} {
		var ran []string
		var out, errb strings.Builder
		code := Main(context.Background(), prog(&ran), tc.args, IO{Stdout: &out, Stderr: &errb})
		if code != tc.code || strings.Join(ran, ";") != tc.ran || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("%q: exit %d ran %q\nstdout %q\nstderr %q", tc.args, code, ran, out.String(), errb.String())
		}
	}
}

// A program of subcommands only: no arguments is a usage error.
func TestSubcommandsOnly(t *testing.T) {
	p := &Command{Name: "tool", Summary: "x", Commands: []*Command{{Name: "a", Run: func(context.Context, []string, IO) int { return 0 }}}}
	var out, errb strings.Builder
	if code := Main(context.Background(), p, nil, IO{Stdout: &out, Stderr: &errb}); code != 2 || !strings.Contains(errb.String(), "tool a") {
		t.Fatalf("no command: exit %d, %q", code, errb.String())
	}
	if code := Main(context.Background(), p, []string{"b"}, IO{Stdout: &out, Stderr: &errb}); code != 2 || !strings.Contains(errb.String(), `unknown command "b"`) {
		t.Fatalf("unknown command: exit %d, %q", code, errb.String())
	}
	if got := Names(p); strings.Join(got, ",") != "tool,tool a" {
		t.Fatalf("Names = %q", got)
	}
}
