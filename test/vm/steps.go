package vm

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// Step is one part of a cluster drive: the steps of a drive run in order on
// one VM, each on what the ones before it left.
type Step struct {
	Name string
	Run  func(ctx context.Context) error
}

// Stepper runs a drive's steps in order, and returns the first failure.
type Stepper func(ctx context.Context, steps []Step) error

// RunAll runs every step: the demo's and the benchmarks' way.
func RunAll(ctx context.Context, steps []Step) error {
	for _, s := range steps {
		if err := s.Run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	return nil
}

// Subtests runs each step as a subtest of t, so that a failure names its
// step and -run selects steps (TestE2EScenarios/cluster/containerd-2/helm_upgrade):
// a step the pattern leaves out still runs, as what a selected step stands
// on, when a later one is selected, and none runs after the last selected.
func Subtests(t *testing.T) Stepper {
	return func(ctx context.Context, steps []Step) error {
		pattern := ""
		if f := flag.Lookup("test.run"); f != nil {
			pattern = f.Value.String()
		}
		chosen := make([]bool, len(steps))
		last := -1
		for i, s := range steps {
			if chosen[i] = selected(pattern, t.Name()+"/"+subtestName(s.Name)); chosen[i] {
				last = i
			}
		}
		for i, s := range steps[:last+1] {
			ran := false
			var err error
			if chosen[i] && !t.Run(s.Name, func(t *testing.T) {
				ran = true
				if err = s.Run(ctx); err != nil {
					t.Error(err)
				}
			}) {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			if !ran { // a step the selected ones stand on
				if err := s.Run(ctx); err != nil {
					return fmt.Errorf("%s (which the selected steps need): %w", s.Name, err)
				}
			}
		}
		return nil
	}
}

// subtestName is name as the testing package rewrites a subtest's.
func subtestName(name string) string { return strings.ReplaceAll(name, " ", "_") }

// selected reports whether the test named full (levels joined by '/') is
// one -run pattern selects, as the testing package matches: each level of
// the pattern against the same level of the name, and a name deeper than
// the pattern is selected when its levels the pattern has match.
func selected(pattern, full string) bool {
	if pattern == "" {
		return true
	}
	levels := strings.Split(full, "/")
	for i, p := range splitPattern(pattern) {
		if i >= len(levels) {
			break
		}
		if ok, err := regexp.MatchString(p, levels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// splitPattern splits a -run pattern at each '/' outside brackets and parentheses.
func splitPattern(s string) []string {
	var out []string
	depth, class, start := 0, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case class:
			class = c != ']'
		case c == '[':
			class = true
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == '/' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
