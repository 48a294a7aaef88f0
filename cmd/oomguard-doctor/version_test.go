package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--version"}, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "oomguard-doctor dev (commit unknown)") {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
}
