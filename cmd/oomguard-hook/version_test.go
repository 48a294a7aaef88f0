package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--version"}, nil, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "oomguard-hook dev (commit unknown)") {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
}
