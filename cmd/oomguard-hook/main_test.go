package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"install", "--stage"}, 2, "", "flag needs an argument"},
		{[]string{"help"}, 0, "oomguard-hook install [flags]", ""},
		{[]string{"--help"}, 0, "--deadline duration", ""},
		{[]string{"-h"}, 0, "Flags of oomguard-hook uninstall:", ""},
		{[]string{"install", "--help"}, 0, "--hooks-dir DIR", ""},
		{[]string{"--version"}, 0, "oomguard-hook dev", ""},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.errs) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errb.String())
		}
	}
}
