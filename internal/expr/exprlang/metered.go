package exprlang

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/vilaca/portal/internal/core"
)

// The helpers of the builtins whose cost the meter can only tell from their
// arguments together (budgetOptions registers them): each charges before it
// lets the builtin run.

// meteredMatch charges `s matches pattern` for a pattern built while the
// rule runs: reading and, unless another rule holds it compiled, compiling
// the pattern, then the match.
func meteredMatch(rx *regexps, p ...any) (any, error) {
	m := p[0].(*meter)
	pattern, ok := p[2].(string)
	if !ok {
		return nil, fmt.Errorf("matches: the pattern is %s, not a string", typeName(p[2]))
	}
	if err := m.charge(int64(len(pattern))/bytesPerOp+1, 0); err != nil {
		return nil, err
	}
	re, err := rx.get(pattern)
	if err != nil {
		return nil, &core.BudgetError{Kind: core.BudgetPattern, Err: fmt.Errorf("matches %s: %w", quoteShort(pattern), err)}
	}
	// Charged whether or not this call compiled it: the cache holds a
	// pattern only while something else does, so a charge on compiling
	// would make the verdict of a rule near its budget depend on other
	// rules and on when the garbage collector ran.
	if err := m.charge(re.insts, satMul(re.insts, regexpInstBytes)); err != nil {
		return nil, err
	}
	return match(m, p[1], re)
}

// match charges and runs one match: Go's regexp may visit every
// instruction of the program for every byte of the subject.
func match(m *meter, subject any, re *compiledRegexp) (any, error) {
	s, ok := subject.(string)
	if !ok {
		return nil, fmt.Errorf("matches: the subject is %s, not a string", typeName(subject))
	}
	// A step of Go's matcher (one instruction on one byte) costs about
	// what an operation does; Unicode classes cost a few times more.
	if err := m.charge(satMul(int64(len(s))+1, re.insts), 0); err != nil {
		return nil, err
	}
	return re.re.MatchString(s), nil
}

func typeName(v any) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("a %T", v)
}

// meteredSplit charges split(s, sep) its pieces before they are made: an
// empty separator makes one string per character, 16 bytes of header each
// (the pieces share the string's bytes).
func meteredSplit(p ...any) (any, error) {
	m := p[0].(*meter)
	s, _ := p[1].(string)
	sep, _ := p[2].(string)
	if err := m.charge(int64(len(s)+len(sep))/bytesPerOp+1, 0); err != nil {
		return nil, err
	}
	var pieces int
	if sep == "" {
		pieces = utf8.RuneCountInString(s)
	} else {
		pieces = strings.Count(s, sep) + 1
	}
	return p[1], m.charge(int64(pieces), satMul(int64(pieces), elemBytes))
}

// meteredTrim charges trim(s, cutset): for a cutset that is not ASCII every
// character trimmed is looked up in the cutset.
func meteredTrim(p ...any) (any, error) {
	m := p[0].(*meter)
	s, _ := p[1].(string)
	cutset, _ := p[2].(string)
	cost := satMul(int64(len(s))/bytesPerOp+1, int64(len(cutset))/bytesPerOp+1)
	return p[1], m.charge(cost, 0)
}

// meteredJoin charges join(p[1], p[2]) its result before it is built.
func meteredJoin(p ...any) (any, error) {
	m := p[0].(*meter)
	if err := m.scan(p[1]); err != nil {
		return nil, err
	}
	sep, _ := p[2].(string)
	n := length(p[1])
	_, b, _ := m.deep(p[1], m.left())
	size := satAdd(b, satMul(max(n-1, 0), int64(len(sep))))
	return p[1], m.charge(size/bytesPerOp, size)
}

// meteredReplace charges replace(p[1], p[2], p[3]) its result before it is
// built: with an empty old string the new one is inserted between every
// character.
func meteredReplace(p ...any) (any, error) {
	m := p[0].(*meter)
	s, ok1 := p[1].(string)
	old, ok2 := p[2].(string)
	repl, ok3 := p[3].(string)
	if !ok1 || !ok2 || !ok3 {
		return p[1], m.charge(1, 0)
	}
	if err := m.charge(int64(len(s))/bytesPerOp+1, 0); err != nil {
		return nil, err
	}
	var n int64
	if old == "" {
		n = int64(len(s)) + 1
	} else {
		n = int64(strings.Count(s, old))
	}
	size := satAdd(int64(len(s)), satMul(n, int64(max(len(repl)-len(old), 0))))
	return p[1], m.charge(size/bytesPerOp, size)
}

// meteredGlob charges glob(pattern, name): matching can try the pattern at
// every position of the name.
func meteredGlob(p ...any) (any, error) {
	m := p[0].(*meter)
	pattern, _ := p[1].(string)
	name, _ := p[2].(string)
	if len(pattern) > maxGlobPattern {
		return nil, fmt.Errorf("glob: pattern is %d bytes, longer than %d", len(pattern), maxGlobPattern)
	}
	cost := satMul(int64(len(pattern)+1), int64(len(name)+1)) / bytesPerOp
	return p[2], m.charge(cost+1, 0)
}

// maxGlobPattern bounds a glob pattern; no name pattern needs more.
const maxGlobPattern = 1024
