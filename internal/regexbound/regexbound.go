// Package regexbound sizes a regular expression before anyone compiles it.
//
// Go's regexp runs in time linear in its input, but both its memory and the
// per-byte cost of a match grow with the program: `.{1000}` is seven bytes
// and a thousand instructions, about 45 KB once compiled. A tenant's pattern
// is therefore bounded by its program, and the bound is checked on an
// estimate from the parse tree first, so a pattern far past it is refused
// without building the program at all.
package regexbound

import (
	"fmt"
	"regexp/syntax"
)

// Insts returns the number of instructions pattern compiles to (Perl
// syntax, as regexp.Compile builds it) or an error that says what to fix
// when it does not parse, is longer than maxBytes or compiles to more than
// maxInsts.
func Insts(pattern string, maxBytes, maxInsts int) (int, error) {
	if len(pattern) > maxBytes {
		return 0, fmt.Errorf("the pattern is %d bytes, longer than %d", len(pattern), maxBytes)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("not a valid RE2 expression: %w", err)
	}
	// The estimate is at least the program's size, within a few
	// instructions per node: anything it puts far past the bound is
	// refused before Simplify expands the repetitions.
	if est := estimate(re); est > 2*int64(maxInsts)+64 {
		return 0, tooLarge(est, maxInsts, "about ")
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, fmt.Errorf("not a valid RE2 expression: %w", err)
	}
	if n := len(prog.Inst); n > maxInsts {
		return 0, tooLarge(int64(n), maxInsts, "")
	}
	return len(prog.Inst), nil
}

func tooLarge(n int64, maxInsts int, about string) error {
	return fmt.Errorf("the pattern compiles to %s%d instructions, more than %d: write fewer or smaller repetitions ({n} repeats what it follows n times)", about, n, maxInsts)
}

// estimate is about the number of instructions re compiles to, computed
// from the parse tree without expanding repetitions (saturating, so nested
// counts cannot overflow): at most twice the real count, since Simplify
// expands x{n} into n copies of x and the estimate adds one per copy.
func estimate(re *syntax.Regexp) int64 {
	const limit = 1 << 40
	var n int64
	switch re.Op {
	case syntax.OpLiteral:
		n = int64(len(re.Rune))
	case syntax.OpRepeat:
		times := re.Max
		if times < 0 {
			times = re.Min + 1
		}
		n = (estimate(re.Sub[0]) + 1) * int64(max(times, 1))
	case syntax.OpCapture:
		n = estimate(re.Sub[0]) + 2
	case syntax.OpConcat:
		for _, s := range re.Sub {
			n += estimate(s)
		}
	default:
		n = 1
		for _, s := range re.Sub {
			n += estimate(s) + 1
		}
	}
	return min(n, limit)
}
