package glob

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"unicode/utf8"
)

// CompileRegexp compiles a rule's regular expression (Go's syntax, as
// regexp.Compile reads it) to the program MatchProg runs. A program is
// plain data: a process that decides once (the hook) keeps it with its
// cached configuration and compiles nothing.
func CompileRegexp(expr string) (*syntax.Prog, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, err
	}
	return syntax.Compile(re.Simplify())
}

// MatchProg reports whether p matches anywhere in s, as regexp's
// MatchString does for the expression p was compiled from: every thread
// of the program run in step over s, in time linear in len(s).
func MatchProg(p *syntax.Prog, s string) bool {
	n := len(p.Inst)
	cur, next := newThreads(n), newThreads(n)
	r, w := runeAt(s, 0)
	ctx := syntax.EmptyOpContext(-1, r)
	for pos := 0; ; {
		if cur.add(p, uint32(p.Start), ctx) { // a match may start anywhere
			return true
		}
		if pos >= len(s) {
			return false
		}
		nr, nw := runeAt(s, pos+w)
		nctx := syntax.EmptyOpContext(r, nr)
		next.clear()
		for _, pc := range cur.dense {
			if in := &p.Inst[pc]; consumes(in, r) && next.add(p, in.Out, nctx) {
				return true
			}
		}
		cur, next = next, cur
		pos += w
		r, w, ctx = nr, nw, nctx
	}
}

// runeAt is the rune at i and its width, -1 at the end (invalid UTF-8 is
// U+FFFD a byte wide, as regexp reads it).
func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(s[i:])
}

func consumes(in *syntax.Inst, r rune) bool {
	switch in.Op {
	case syntax.InstRune:
		return in.MatchRune(r)
	case syntax.InstRune1:
		return r == in.Rune[0]
	case syntax.InstRuneAny:
		return true
	case syntax.InstRuneAnyNotNL:
		return r != '\n'
	}
	return false
}

// threads is the set of a program's instructions live at one position.
type threads struct {
	sparse, dense, stack []uint32
}

func newThreads(n int) *threads {
	return &threads{sparse: make([]uint32, n), dense: make([]uint32, 0, n)}
}

func (t *threads) clear() { t.dense = t.dense[:0] }

func (t *threads) has(pc uint32) bool {
	i := t.sparse[pc]
	return int(i) < len(t.dense) && t.dense[i] == pc
}

// add adds pc and every instruction it leads to without consuming a rune
// where the position's context is ctx; it reports whether one matches.
func (t *threads) add(p *syntax.Prog, pc uint32, ctx syntax.EmptyOp) bool {
	stack := append(t.stack[:0], pc)
	defer func() { t.stack = stack[:0] }()
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.has(pc) {
			continue
		}
		t.sparse[pc] = uint32(len(t.dense))
		t.dense = append(t.dense, pc)
		switch in := &p.Inst[pc]; in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Arg, in.Out)
		case syntax.InstCapture, syntax.InstNop:
			stack = append(stack, in.Out)
		case syntax.InstEmptyWidth:
			if syntax.EmptyOp(in.Arg)&^ctx == 0 {
				stack = append(stack, in.Out)
			}
		}
	}
	return false
}

// CheckProg reports why p is not a program MatchProg can run: one read
// back from a file must not send it outside its instructions.
func CheckProg(p *syntax.Prog) error {
	if p == nil {
		return errors.New("no program")
	}
	n := uint32(len(p.Inst))
	if p.Start < 0 || uint32(p.Start) >= n {
		return fmt.Errorf("start %d outside %d instructions", p.Start, n)
	}
	for i, in := range p.Inst {
		bad := false
		switch in.Op {
		case syntax.InstMatch, syntax.InstFail:
		case syntax.InstAlt, syntax.InstAltMatch:
			bad = in.Out >= n || in.Arg >= n
		case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			bad = in.Out >= n
		case syntax.InstRune:
			bad = in.Out >= n || len(in.Rune) == 0 || len(in.Rune) > 1 && len(in.Rune)%2 != 0
		case syntax.InstRune1:
			bad = in.Out >= n || len(in.Rune) != 1
		default:
			bad = true
		}
		if bad {
			return fmt.Errorf("instruction %d (%v) is malformed", i, in.Op)
		}
	}
	return nil
}
