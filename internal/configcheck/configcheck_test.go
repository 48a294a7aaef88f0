package configcheck

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cli"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := "[[rule]]\nname = \"vm\"\noom_score_adj = 900\n[rule.match]\nnamespaces = [\"vms\"]\n"
	for _, tc := range []struct {
		name, text string
		code       int
		out, err   string
	}{
		{"good", good, 0, "valid: " + filepath.Join(dir, "good") + " hash " + config.Hash([]byte(good)) + ", 1 rules", ""},
		{"out of range", "[[rule]]\nname = \"x\"\noom_score_adj = 5000\n", 1, "", "oom_score_adj 5000: want a value from -1000 to 1000"},
		{"typo", "[[rule]]\nnmae = \"x\"\n", 1, "", "nmae"},
		{"escapes", "[[rule]]\nname = \"\\u001b[2J\"\noom_score_adj = 5000\n", 1, "", `\x1b[2J`},
		{"missing", "", 1, "", "no such file"},
		// Every problem on a line of its own, not one line joined by a literal \n.
		{"two problems", "[[rule]]\nname = \"x\"\noom_score_adj = 5000\n[[rule]]\nname = \"x\"\n", 1, "", "oom_score_adj 5000: want a value from -1000 to 1000\ninvalid: config "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if tc.name != "missing" {
				os.WriteFile(p, []byte(tc.text), 0o644)
			}
			var out, errb bytes.Buffer
			code := Command().Run(context.Background(), []string{p}, cli.IO{Stdout: &out, Stderr: &errb})
			if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) || strings.Contains(errb.String(), "\x1b") {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
			}
		})
	}
}
