// Package rx replaces Coraza's @rx operator with one that runs on RE2
// (github.com/wasilibs/go-re2): a DFA, linear in the subject, where Go's
// regexp runs its NFA at about 1 µs per byte per Core Rule Set pattern on
// long arguments. RE2 runs compiled to pure Go (wasm2go), so Portal builds
// without cgo; go-re2's re2_cgo tag (the system's libre2) measured no faster.
//
// Semantics follow Coraza v3.8.1's rx (internal/operators/rx.go) where the
// Core Rule Set relies on them: the pattern runs with (?sm) prepended,
// patterns that match arbitrary bytes (\xNN escapes that are not UTF-8) run
// on rsc.io/binaryregexp, and a capturing rule receives the match and up to
// eight groups as TX:0..8 ("" for a group that did not take part).
//
// Subjects that are not valid UTF-8 (t:base64Decode and t:urlDecode make
// them from any argument) need care: Go's regexp reads each invalid byte as
// U+FFFD and goes on, RE2 stops matching at it, so an attacker could hide a
// payload behind one. Such a subject is matched with each invalid byte
// spelled U+FFFD, which is the rune sequence Go's regexp sees, and the
// captures are mapped back to the original bytes.
package rx

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"
	_ "unsafe" // go:linkname

	"github.com/corazawaf/coraza/v3/experimental/plugins"
	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"
	re2 "github.com/wasilibs/go-re2"
	"github.com/wasilibs/go-re2/experimental"
	"rsc.io/binaryregexp"
)

// MaxMemory bounds what RE2 may spend on one pattern: its compiled program
// and its DFA cache. A pattern whose program does not fit does not compile;
// a search whose DFA cache fills resets it, or falls back to RE2's NFA,
// still linear in the subject. RE2's own default is 8 MiB; go-re2's is
// 128 MiB, which a rule set of many hostile patterns would multiply. Every
// Core Rule Set v4.25 pattern compiles within it; the DFA of its SMTP
// injection pattern (.{1,255} counters) fills on some long inputs and the
// search goes on in the NFA, with the same answer.
const MaxMemory = 8 << 20

// compileRE2 is go-re2's Compile with options: the package exposes
// CompileOptions.MaxMem only for sets (experimental.CompileSetWithOptions),
// and a set reports no captures. Pinned by go.mod; a go-re2 version that
// renames it fails to link, and TestMaxMemoryBound checks the effect.
//
//go:linkname compileRE2 github.com/wasilibs/go-re2/internal.Compile
func compileRE2(expr string, opts experimental.CompileOptions) (*re2.Regexp, error)

// ErrTooLarge is wrapped by the error of a pattern that needs more than
// MaxMemory.
var ErrTooLarge = errors.New("the regular expression needs more memory than Portal allows for one pattern")

func init() {
	plugins.RegisterOperator("rx", New)
}

type operator struct {
	re  *re2.Regexp
	pre *prefilter
}

type binaryOperator struct {
	re  *binaryregexp.Regexp
	pre *prefilter
}

// New is the operator factory Coraza calls for each @rx.
func New(options plugintypes.OperatorOptions) (plugintypes.Operator, error) {
	// Coraza built without coraza.rule.no_regex_multiline (as Portal is)
	// prepends (?sm): the CRS relies on it (942522-7).
	data := "(?sm)" + options.Arguments
	if matchesArbitraryBytes(data) {
		op, err := memoizeDo(options.Memoizer, "rx-binary:"+options.Arguments, func() (any, error) {
			re, err := binaryregexp.Compile(options.Arguments)
			if err != nil {
				return nil, err
			}
			// Each byte of the subject is a rune to binaryregexp, so no
			// subject byte folds to an ASCII letter and the filter's
			// literals, all ASCII, hold as they do for RE2.
			return binaryOperator{re: re, pre: newPrefilter(options.Arguments)}, nil
		})
		if err != nil {
			return nil, err
		}
		return op.(binaryOperator), nil
	}
	c, err := memoizeDo(options.Memoizer, "rx-re2:"+data, func() (any, error) {
		re, err := compile(data)
		if err != nil {
			return nil, err
		}
		return operator{re: re, pre: newPrefilter(data)}, nil
	})
	if err != nil {
		return nil, err
	}
	return c.(operator), nil
}

// compile compiles expr, a pattern as @rx runs it (flags included). Go's
// regexp/syntax checks it first, so a pattern Coraza's own rx refuses is
// refused with the same message, and RE2 never sees syntax Go does not
// accept (Perl's \C, for one).
func compile(expr string) (*re2.Regexp, error) {
	hookRE2Log()
	if _, err := syntax.Parse(expr, syntax.Perl); err != nil {
		return nil, err
	}
	re, err := compileRE2(expr, experimental.CompileOptions{MaxMem: MaxMemory})
	if err != nil {
		if strings.Contains(err.Error(), "too large") {
			return nil, fmt.Errorf("%w (%d MiB): simplify it or split it into several rules: %v", ErrTooLarge, MaxMemory>>20, err)
		}
		return nil, fmt.Errorf("RE2 does not accept the regular expression: %w", err)
	}
	return re, nil
}

func (o operator) Evaluate(tx plugintypes.TransactionState, value string) bool {
	if !o.pre.mayMatch(value) {
		return false
	}
	subject, back := value, []int(nil)
	if !utf8.ValidString(value) {
		subject, back = spellInvalid(value, tx.Capturing())
	}
	if !tx.Capturing() {
		return o.re.MatchString(subject)
	}
	m := o.re.FindStringSubmatchIndex(subject)
	if back != nil {
		for i, off := range m {
			if off >= 0 {
				m[i] = back[off]
			}
		}
	}
	return capture(tx, value, m)
}

// spellInvalid returns s with each byte that is not part of a UTF-8
// sequence replaced by U+FFFD, the rune Go's regexp reads for it; with
// offsets, also the offset in s of each offset of the result.
func spellInvalid(s string, offsets bool) (string, []int) {
	var b strings.Builder
	b.Grow(len(s) + len(s)/2)
	var back []int
	if offsets {
		back = make([]int, 0, len(s)+len(s)/2+1)
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
			if offsets {
				back = append(back, i, i, i)
			}
		} else {
			b.WriteString(s[i : i+n])
			if offsets {
				for j := range n {
					back = append(back, i+j)
				}
			}
		}
		i += n
	}
	if offsets {
		back = append(back, len(s))
	}
	return b.String(), back
}

// capture sets TX:0..8 from a match's index pairs, as Coraza's rx does.
func capture(tx plugintypes.TransactionState, value string, m []int) bool {
	if m == nil {
		return false
	}
	for i := 0; i < len(m)/2 && i < 9; i++ {
		if m[2*i] >= 0 {
			tx.CaptureField(i, value[m[2*i]:m[2*i+1]])
		} else {
			tx.CaptureField(i, "")
		}
	}
	return true
}

func (o binaryOperator) Evaluate(tx plugintypes.TransactionState, value string) bool {
	if !o.pre.mayMatch(value) {
		return false
	}
	if !tx.Capturing() {
		return o.re.MatchString(value)
	}
	m := o.re.FindStringSubmatch(value)
	if m == nil {
		return false
	}
	for i, c := range m {
		if i == 9 {
			break
		}
		tx.CaptureField(i, c)
	}
	return true
}

func memoizeDo(m plugintypes.Memoizer, key string, fn func() (any, error)) (any, error) {
	if m != nil {
		return m.Do(key, fn)
	}
	return fn()
}

// matchesArbitraryBytes reports whether expr's \xNN and \x{NN} escapes
// spell bytes that are not UTF-8, as Coraza's rx decides it.
func matchesArbitraryBytes(expr string) bool {
	decoded := make([]byte, 0, len(expr))
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		if c != '\\' {
			decoded = append(decoded, c)
			continue
		}
		if i+3 >= len(expr) {
			decoded = append(decoded, expr[i:]...)
			break
		}
		if expr[i+1] != 'x' {
			decoded = append(decoded, expr[i])
			continue
		}
		sub := expr[i:]
		advance := 3
		if len(sub) >= 6 && sub[2] == '{' {
			if end := strings.IndexByte(sub, '}'); end != -1 {
				sub = `\x` + sub[3:end]
				advance = end
			}
		}
		v, mb, _, err := strconv.UnquoteChar(sub, 0)
		if err != nil || mb {
			decoded = append(decoded, expr[i])
			continue
		}
		decoded = append(decoded, byte(v))
		i += advance
	}
	return !utf8.Valid(decoded)
}
