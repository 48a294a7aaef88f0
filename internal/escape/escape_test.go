package escape

import (
	"strings"
	"testing"
)

func TestTerminal(t *testing.T) {
	for in, want := range map[string]string{
		"systemd":                  "systemd",
		"python3 train.py":         "python3 train.py",
		"\x1b[2J\x1b[Hpwned\nline": `\x1b[2J\x1b[Hpwned\nline`,
		"\x1b]0;title\x07":         `\x1b]0;title\a`,
		"a\u202eevil":              `a\u202eevil`,
		"caf\xe9":                  `caf\xe9`,
		"naïve ünïcode":            "naïve ünïcode",
		"\x9b2J":                   `\x9b2J`,
		"tab\there":                `tab\there`,
	} {
		if got := Terminal(in); got != want {
			t.Errorf("Terminal(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzTerminal(f *testing.F) {
	for _, s := range []string{"systemd", "\x1b[2J", "a\u202eb", "\xff\xfe", "\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Terminal(s)
		for _, r := range out {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
				t.Fatalf("Terminal(%q) = %q keeps %U", s, out, r)
			}
		}
		if !strings.ContainsAny(s, "\x00\x1b\n\r\t\x7f") && needs(s) == false && out != s {
			t.Fatalf("printable %q changed to %q", s, out)
		}
	})
}
