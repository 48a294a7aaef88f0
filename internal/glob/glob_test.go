package glob

import (
	"fmt"
	"regexp"
	"testing"
)

// compile is g as Go's regexp compiles its expression: what a Pattern must
// match the same as.
func compile(g string) (*regexp.Regexp, error) {
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

func TestCompile(t *testing.T) {
	for _, tc := range []struct {
		glob, s string
		want    bool
	}{
		{"*", "", true},
		{"*", "a/b:c", true},
		{"registry.example.com/*", "registry.example.com/ml/base:v1", true},
		{"registry.example.com/*", "registry.example.org/ml", false},
		{"kube-?", "kube-a", true},
		{"kube-?", "kube-ab", false},
		{"team-[ab]", "team-b", true},
		{"team-[!ab]", "team-b", false},
		{"team-[!ab]", "team-c", true},
		{"a.b", "axb", false},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"[]]x", "]x", true},
	} {
		re, err := compile(tc.glob)
		if err != nil {
			t.Fatalf("%q: %v", tc.glob, err)
		}
		if got := re.MatchString(tc.s); got != tc.want {
			t.Errorf("glob %q on %q = %v, want %v", tc.glob, tc.s, got, tc.want)
		}
	}
	for _, bad := range []string{"[", "a[b", `x\`, "[!]", "[z-a]"} {
		if _, err := compile(bad); err == nil {
			t.Errorf("glob %q: want an error", bad)
		}
		if err := Check(bad); err == nil {
			t.Errorf("Check(%q): want an error", bad)
		}
	}
}

// Check, which the configuration's validation runs, accepts exactly what
// Compile, which the policy runs, compiles.
func FuzzCheck(f *testing.F) {
	for _, g := range []string{"*", "team-[!ab]", "[]]x", "[z-a]", `x\`, "a{2,1001}", "[[:alpha:]]"} {
		f.Add(g)
	}
	f.Fuzz(func(t *testing.T, g string) {
		_, cerr := compile(g)
		if err := Check(g); (err == nil) != (cerr == nil) {
			t.Fatalf("glob %q: Check says %v, Compile %v", g, err, cerr)
		}
	})
}

func TestPattern(t *testing.T) {
	for _, tc := range []struct {
		glob, s string
		want    bool
	}{
		{"*", "", true},
		{"kube-*", "kube-system", true},
		{"kube-*", "kube", false},
		{"*-runc", "sysbox-runc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXb\nc", false},
		{"*", "a\nb", false},
		{"?", "é", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"team-[ab]", "team-b", true},
		{"team-[!ab]", "team-b", false},
	} {
		p, err := Parse(tc.glob, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.glob, err)
		}
		if got := p.Match(tc.s); got != tc.want {
			t.Errorf("glob %q on %q = %v, want %v", tc.glob, tc.s, got, tc.want)
		}
	}
}

// A Pattern matches what the glob's regular expression matches.
func FuzzMatch(f *testing.F) {
	for _, c := range [][2]string{{"*", "a\nb"}, {"a*b*c", "aXbYc"}, {"*\n*", "a\nb"}, {`\**`, "**"}, {"?*?", "ab"}, {"[a-c]*", "b\n"}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, g, s string) {
		p, err := Parse(g, nil)
		if err != nil {
			return
		}
		re, err := compile(g)
		if err != nil {
			t.Fatalf("glob %q parses, and does not compile: %v", g, err)
		}
		if got, want := p.Match(s), re.MatchString(s); got != want {
			t.Fatalf("glob %q on %q: %v, its regular expression says %v", g, s, got, want)
		}
	})
}
