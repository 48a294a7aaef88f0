// Package escape makes text that a pod, an image or a registry chose safe to
// print on a terminal: a process can name itself with escape sequences and
// newlines, and a registry can answer with anything.
package escape

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Terminal returns s with every character that is not printable — control
// characters, escape sequences, bidirectional overrides, invalid UTF-8 —
// written as a Go escape (\x1b, \n, \u202e); s itself when it has none.
func Terminal(s string) string {
	if !needs(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&15, 16))
		case r == '\\' || printable(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r) // 'x' with the escape inside
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

func needs(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || (r != '\\' && !printable(r)) {
			return true
		}
		i += size
	}
	return false
}

func printable(r rune) bool {
	return r == ' ' || (unicode.IsPrint(r) && !unicode.Is(unicode.Bidi_Control, r))
}
