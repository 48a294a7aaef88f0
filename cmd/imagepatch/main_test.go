package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"--version"}, 0, "imagepatch dev (commit unknown)", ""},
		{[]string{"--help"}, 0, "imagepatch resolve [flags] IMAGE", ""},
		{[]string{"help", "apply"}, 0, "--tag-regex RE", ""},
		{[]string{"apply", "-h"}, 0, "--from-file FILE", ""},
		{nil, 2, "", "imagepatch plan [flags] [REF...]"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"apply", "--bogus"}, 2, "", "not defined: -bogus"},
		{[]string{"resolve"}, 2, "", "want IMAGE"},
		{[]string{"apply", "--tags", "v*"}, 2, "", "give --repo"},
		{[]string{"spec", "x"}, 2, "", `unexpected argument "x"`},
		{[]string{"webhook", "-h"}, 0, "--max-patches-per-repository N", ""},
		{[]string{"webhook", "--images", "r.example/*", "--tls-cert-file", "c", "--tls-key-file", "k", "--max-concurrent-patches", "0"}, 2, "", "take 1 or more"},
		{[]string{"webhook", "--images", "r.example/*", "--tls-cert-file", "c", "--tls-key-file", "k", "--client-names", "kube-apiserver"}, 2, "", "--client-names needs --client-ca"},
		{[]string{"webhook", "--images", "r.example/*", "--tls-cert-file", "c", "--tls-key-file", "k", "--client-ca", "/nonexistent/ca.crt"}, 1, "", "the client CA /nonexistent/ca.crt (--client-ca)"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.errs) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errb.String())
		}
	}
}
