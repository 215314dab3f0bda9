package exprlang

import (
	"fmt"
	"regexp"
	"runtime"
	"sync"
	"weak"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"

	"github.com/vilaca/portal/internal/regexbound"
)

// Bounds of the patterns of `matches`, literal or built while a rule runs.
const (
	// MaxRegexInsts bounds one pattern's program: the APIRule bound, far
	// beyond any name or label pattern, and about 90 KB compiled.
	MaxRegexInsts = 2000
	// MaxRegexBytes bounds one pattern's text.
	MaxRegexBytes = 4096
	// MaxRegexInstsPerExpression bounds the literal patterns of one
	// expression together, so the programs a rule keeps stay within a
	// small multiple of its text.
	MaxRegexInstsPerExpression = 10_000
	// regexpInstBytes is what one compiled instruction is charged: the
	// instruction, its share of the one-pass program and of the matcher
	// a match allocates.
	regexpInstBytes = 64
)

// A compiledRegexp is a pattern compiled once and shared by every rule and
// evaluation that uses it, for as long as one of them holds it.
type compiledRegexp struct {
	re    *regexp.Regexp
	insts int64
}

// regexps shares compiled patterns across the rules of a process: a literal
// pattern written in many rules is compiled and kept once. Entries are weak:
// a pattern lives as long as a compiled rule (or a running evaluation)
// holds it, so the cache needs no bound of its own beyond the rules'.
type regexps struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[compiledRegexp]
}

func newRegexps() *regexps {
	return &regexps{m: map[string]weak.Pointer[compiledRegexp]{}}
}

// get returns the compiled pattern, compiling it (within the bounds) when no
// rule holds it yet.
func (c *regexps) get(pattern string) (*compiledRegexp, error) {
	c.mu.Lock()
	wp, ok := c.m[pattern]
	c.mu.Unlock()
	if ok {
		if re := wp.Value(); re != nil {
			return re, nil
		}
	}
	n, err := regexbound.Insts(pattern, MaxRegexBytes, MaxRegexInsts)
	if err != nil {
		return nil, err
	}
	r, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	re := &compiledRegexp{re: r, insts: int64(n)}
	c.mu.Lock()
	// Another evaluation may have compiled it meanwhile: keep one.
	if old := c.m[pattern].Value(); old != nil {
		c.mu.Unlock()
		return old, nil
	}
	wp = weak.Make(re)
	c.m[pattern] = wp
	c.mu.Unlock()
	runtime.AddCleanup(re, c.forget, cleanupKey{pattern, wp})
	return re, nil
}

type cleanupKey struct {
	pattern string
	wp      weak.Pointer[compiledRegexp]
}

// forget drops a pattern no rule holds any more, unless it was compiled
// again since.
func (c *regexps) forget(k cleanupKey) {
	c.mu.Lock()
	if c.m[k.pattern] == k.wp {
		delete(c.m, k.pattern)
	}
	c.mu.Unlock()
}

// checkPatterns refuses an expression whose literal `matches` patterns are
// past their bounds before expr-lang compiles them (its type checker
// compiles every literal pattern, however large, to validate it).
func checkPatterns(tree *parser.Tree) error {
	v := &patternVisitor{}
	ast.Walk(&tree.Node, v)
	return v.err
}

type patternVisitor struct {
	insts int
	seen  map[string]bool
	err   error
}

func (v *patternVisitor) Visit(node *ast.Node) {
	b, ok := (*node).(*ast.BinaryNode)
	if !ok || b.Operator != "matches" || v.err != nil {
		return
	}
	s, ok := b.Right.(*ast.StringNode)
	if !ok || v.seen[s.Value] {
		return
	}
	n, err := regexbound.Insts(s.Value, MaxRegexBytes, MaxRegexInsts)
	if err != nil {
		v.err = patternError(s, err)
		return
	}
	if v.seen == nil {
		v.seen = map[string]bool{}
	}
	v.seen[s.Value] = true
	if v.insts += n; v.insts > MaxRegexInstsPerExpression {
		v.err = patternError(s, fmt.Errorf("the patterns of this expression compile to %d instructions together, more than %d: share one pattern or simplify them", v.insts, MaxRegexInstsPerExpression))
	}
}

// patternError places err on the pattern's position.
func patternError(s *ast.StringNode, err error) error {
	return &positioned{offset: s.Location().From, err: fmt.Errorf("matches %s: %w", quoteShort(s.Value), err)}
}

// quoteShort quotes a pattern for an error, cut to a readable length.
func quoteShort(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q...", s[:40])
	}
	return fmt.Sprintf("%q", s)
}

// positioned is an error at an offset of the expression.
type positioned struct {
	offset int
	err    error
}

func (p *positioned) Error() string { return p.err.Error() }
func (p *positioned) Unwrap() error { return p.err }
