// Package glob is the shell globs of oomguard's rules as regular
// expressions: the configuration checks them, the policy compiles them.
// Unlike path.Match, '*' also matches '/', so "registry.example.com/*"
// covers every image there. Supported: '*', '?', '[...]' with '!' or '^'
// negation, and '\' escapes.
package glob

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// Regexp is g as an anchored regular expression.
func Regexp(g string) (string, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); i++ {
		switch ch := g[i]; ch {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			if i+1 == len(g) {
				return "", fmt.Errorf("glob %q ends in a lone '\\'", g)
			}
			i++
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		case '[':
			end := strings.IndexByte(g[i+1:], ']')
			if end == 0 { // "[]...]": a leading ']' is a literal member
				if e2 := strings.IndexByte(g[i+2:], ']'); e2 >= 0 {
					end = e2 + 1
				} else {
					end = -1
				}
			}
			if end < 0 {
				return "", fmt.Errorf("glob %q has an unterminated '['", g)
			}
			class := g[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			if class == "" || class == "^" {
				return "", fmt.Errorf("glob %q has an empty character class", g)
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(ch)))
		}
	}
	b.WriteString("$")
	return b.String(), nil
}

// Check reports why g is not a glob Compile takes, without compiling it.
func Check(g string) error {
	src, err := Regexp(g)
	if err != nil {
		return err
	}
	if _, err := syntax.Parse(src, syntax.Perl); err != nil {
		return fmt.Errorf("glob %q is not valid: %w", g, err)
	}
	return nil
}

// Compile is g as a compiled anchored regular expression.
func Compile(g string) (*regexp.Regexp, error) {
	src, err := Regexp(g)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("glob %q is not valid: %w", g, err)
	}
	return re, nil
}

// CheckRegexp reports why expr is not a regular expression regexp.Compile
// takes, without compiling it.
func CheckRegexp(expr string) error {
	_, err := syntax.Parse(expr, syntax.Perl)
	return err
}
