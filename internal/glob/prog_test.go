package glob

import (
	"regexp"
	"regexp/syntax"
	"testing"
)

func TestMatchProg(t *testing.T) {
	for _, tc := range []struct {
		expr, s string
		want    bool
	}{
		{`(^|/)(systemd|init)$`, "/sbin/init", true},
		{`(^|/)(systemd|init)$`, "init", true},
		{`(^|/)(systemd|init)$`, "/usr/lib/systemd/systemd", true},
		{`(^|/)(systemd|init)$`, "/bin/initialize", false},
		{`(^|/)(systemd|init)$`, "/bin/my-init", false},
		{`(^|/)(systemd|init)$`, "", false},
		{`^$`, "", true},
		{`$`, "abc", true},
		{`\binit\b`, "run init now", true},
		{`\binit\b`, "reinit", false},
		{`(?i)SUPERVISORD`, "/usr/bin/supervisord", true},
		{`^[^/]+$`, "a/b", false},
		{`a.c`, "a\nc", false},
		{`(?s)a.c`, "a\nc", true},
		{`x*`, "", true},
		{`\x{fffd}`, "\xff", true},
		{`é$`, "café", true},
	} {
		p, err := CompileRegexp(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := MatchProg(p, tc.s); got != tc.want {
			t.Errorf("%q on %q: %v, want %v", tc.expr, tc.s, got, tc.want)
		}
	}
}

// A program matches what regexp matches for its expression.
func FuzzMatchProg(f *testing.F) {
	for _, c := range [][2]string{{`(^|/)(systemd|init)$`, "/sbin/init"}, {`\bx\B`, "xx x"}, {`(?i)k[a-z]+$`, "Kube"}, {`^a|b$`, "cab"}, {`(a*)*$`, "aaab"}, {`[^\n]`, "\n"}, {`(?m)^b`, "a\nb"}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, expr, s string) {
		re, err := regexp.Compile(expr)
		if err != nil {
			return
		}
		p, err := CompileRegexp(expr)
		if err != nil {
			t.Fatalf("%q compiles with regexp, not with CompileRegexp: %v", expr, err)
		}
		if err := CheckProg(p); err != nil {
			t.Fatalf("%q: the compiler's own program refused: %v", expr, err)
		}
		if got, want := MatchProg(p, s), re.MatchString(s); got != want {
			t.Fatalf("%q on %q: %v, regexp says %v", expr, s, got, want)
		}
	})
}

// A program read back from a file that points outside itself is refused,
// not run.
func TestCheckProgRefusesMalformed(t *testing.T) {
	good := func() *syntax.Prog {
		p, err := CompileRegexp(`(^|/)(systemd|init)$`)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, spoil := range map[string]func(*syntax.Prog){
		"start outside":   func(p *syntax.Prog) { p.Start = len(p.Inst) },
		"negative start":  func(p *syntax.Prog) { p.Start = -1 },
		"out outside":     func(p *syntax.Prog) { p.Inst[p.Start].Out = 1 << 30 },
		"alt arg outside": func(p *syntax.Prog) { p.Inst = append(p.Inst, syntax.Inst{Op: syntax.InstAlt, Out: 0, Arg: 99}) },
		"odd rune pairs": func(p *syntax.Prog) {
			p.Inst = append(p.Inst, syntax.Inst{Op: syntax.InstRune, Rune: []rune{'a', 'b', 'c'}})
		},
		"empty rune":      func(p *syntax.Prog) { p.Inst = append(p.Inst, syntax.Inst{Op: syntax.InstRune1}) },
		"unknown op":      func(p *syntax.Prog) { p.Inst = append(p.Inst, syntax.Inst{Op: 200}) },
		"no instructions": func(p *syntax.Prog) { p.Inst = nil },
	} {
		p := good()
		spoil(p)
		if err := CheckProg(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := CheckProg(good()); err != nil {
		t.Fatal(err)
	}
	if CheckProg(nil) == nil {
		t.Error("nil accepted")
	}
}
