// Package glob is the shell globs of oomguard's rules as regular
// expressions, and the rules' expressions as programs that match without a
// regexp compiled (prog.go): the configuration checks them, the policy
// compiles them, and a cached configuration keeps them compiled.
// Unlike path.Match, '*' also matches '/', so "registry.example.com/*"
// covers every image there. Supported: '*', '?', '[...]' with '!' or '^'
// negation, and '\' escapes.
package glob

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"
	"unicode/utf8"
)

// Regexp is g as an anchored regular expression.
func Regexp(g string) (string, error) {
	if !utf8.ValidString(g) {
		return "", fmt.Errorf("glob %q is not UTF-8", g)
	}
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
			_, w := utf8.DecodeRuneInString(g[i+1:])
			b.WriteString(regexp.QuoteMeta(g[i+1 : i+1+w]))
			i += w
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
			_, w := utf8.DecodeRuneInString(g[i:])
			b.WriteString(regexp.QuoteMeta(g[i : i+w]))
			i += w - 1
		}
	}
	b.WriteString("$")
	return b.String(), nil
}

// Check reports why g is not a glob whose expression (Regexp) Go's regexp
// takes, without compiling it.
func Check(g string) error {
	src, err := Regexp(g)
	if err != nil || !strings.Contains(g, "[") { // quoted literals, '.' and '.*' parse
		return err
	}
	if _, err := syntax.Parse(src, syntax.Perl); err != nil {
		return fmt.Errorf("glob %q is not valid: %w", g, err)
	}
	return nil
}

// CheckRegexp reports why expr is not a regular expression regexp.Compile
// takes, without compiling it.
func CheckRegexp(expr string) error {
	_, err := syntax.Parse(expr, syntax.Perl)
	return err
}

// Pattern is a glob ready to match. One without a character class is
// matched as it is, with nothing compiled (a hook decides once per
// container, in a process of its own); one with a class runs as a program
// (MatchProg), given or compiled the first time it matches.
type Pattern struct {
	glob string
	prog func() *syntax.Prog
}

// Parse checks g and returns it as a Pattern; compiled holds programs
// already compiled, by their expression (ProgramSource), as a cached
// configuration keeps them.
func Parse(g string, compiled map[string]*syntax.Prog) (Pattern, error) {
	if err := Check(g); err != nil {
		return Pattern{}, err
	}
	p := Pattern{glob: g}
	if src, ok := ProgramSource(g); ok {
		if prog := compiled[src]; prog != nil {
			p.prog = func() *syntax.Prog { return prog }
		} else {
			p.prog = sync.OnceValue(func() *syntax.Prog { prog, _ := CompileRegexp(src); return prog })
		}
	}
	return p, nil
}

// ProgramSource is the expression a Pattern of g runs as a program; false
// for a glob matched as it is.
func ProgramSource(g string) (string, bool) {
	if !strings.Contains(g, "[") {
		return "", false
	}
	src, err := Regexp(g)
	return src, err == nil
}

// Match reports whether s matches the whole glob, as its regular
// expression (Regexp) would: '*' and '?' match any character but a newline.
func (p Pattern) Match(s string) bool {
	if p.prog != nil {
		prog := p.prog()
		return prog != nil && MatchProg(prog, s)
	}
	return match(p.glob, s)
}

// match is a glob of literals, escapes, '?' and '*' against the whole of
// s, rune by rune, backtracking to the last '*' only.
func match(g, s string) bool {
	type point struct{ g, s int }
	var last *point // the pattern after the last '*', and where s stands
	gi, si := 0, 0
	for {
		if gi < len(g) {
			switch g[gi] {
			case '*':
				last = &point{gi + 1, si}
				gi++
				continue
			case '?':
				if r, w := utf8.DecodeRuneInString(s[si:]); si < len(s) && r != '\n' {
					gi, si = gi+1, si+w
					continue
				}
			default:
				lit, lw := utf8.DecodeRuneInString(g[gi:])
				if lit == '\\' {
					lit, lw = utf8.DecodeRuneInString(g[gi+1:])
					lw++
				}
				if r, w := utf8.DecodeRuneInString(s[si:]); si < len(s) && r == lit {
					gi, si = gi+lw, si+w
					continue
				}
			}
		} else if si == len(s) {
			return true
		}
		// No match here: let the last '*' take one rune more, unless that
		// rune is a newline, which no '*' takes.
		if last == nil || last.s >= len(s) {
			return false
		}
		r, w := utf8.DecodeRuneInString(s[last.s:])
		if r == '\n' {
			return false
		}
		last.s += w
		gi, si = last.g, last.s
	}
}
