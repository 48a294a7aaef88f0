package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--bogus"}, nil, &out, &errb); code != 2 {
		t.Fatalf("unknown flag: exit %d", code)
	}
	if code := run([]string{"extra"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unexpected argument "extra"`) {
		t.Fatalf("extra argument: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"help"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "install") {
		t.Fatalf("help: exit %d", code)
	}
}
