package main

import (
	"strings"
	"testing"

	"github.com/oomguard/oomguard/imagepatch"
)

// A registry answers with any text; the table shows it escaped.
func TestSummaryEscapesRegistryText(t *testing.T) {
	var b strings.Builder
	summary(&b, []imagepatch.Result{{Source: "r/x:v1", Action: imagepatch.ActionFailed,
		Error: "GET: UNAUTHORIZED: \x1b[2J\x1b]0;owned\x07 please log in\nagain"}}, false)
	if strings.ContainsAny(b.String(), "\x1b\x07") || !strings.Contains(b.String(), `\x1b[2J`) {
		t.Fatalf("%q", b.String())
	}
}
