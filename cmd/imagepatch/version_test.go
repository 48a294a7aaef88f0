package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

var _ = context.Background

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "imagepatch dev (commit unknown)") {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
}
