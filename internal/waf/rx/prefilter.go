package rx

import (
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/vilaca/portal/internal/waf/ascii"
	"github.com/vilaca/portal/internal/waf/wordset"
)

// A prefilter answers, before RE2 runs, that a subject cannot match: every
// match of the pattern contains one of a set of ASCII literals, and the
// subject contains none of them. On benign traffic most Core Rule Set
// patterns are ruled out this way by one pass of an Aho-Corasick automaton,
// which costs a fraction of a call into RE2 (the subject is copied into
// RE2's memory on each call).
//
// This is RE2's own FilteredRE2 idea and not Coraza's SecRxPreFilter, which
// guesses literals from the pattern's text and misses CRS detections. Here
// the literals come from the parsed pattern, so the filter is exact: it may
// let through a subject that does not match (RE2 then says no), never stop
// one that does.
//
// Case folding is where such filters go wrong: (?i)k also matches the
// Kelvin sign (U+212A) and (?i)s the long s (U+017F), the only runes
// outside ASCII whose case folds reach an ASCII letter. The automaton folds
// ASCII only, so a subject with either of them skips the filter and goes to
// RE2, and a literal with a rune outside ASCII is never required. Any other
// subject, ASCII, UTF-8 or not UTF-8 at all (whose invalid bytes Go's
// regexp reads as U+FFFD), contains a required literal as ASCII bytes
// wherever it matches.
type prefilter struct {
	// single holds the one-byte literals, both cases: a table scan.
	single [256]bool
	// plain are longer literals without letters: strings.Contains, which
	// the runtime vectorises.
	plain []string
	// words are longer literals with letters, and plain literals when
	// there are more than maxPlain, found by one pass of an ASCII
	// case-folding Aho-Corasick automaton; nil if there are none.
	words *wordset.Set
	// hasSingle is whether single holds anything.
	hasSingle bool
}

// Bounds on one pattern's filter. maxPrefilterLiterals bounds the analysis.
// The automaton, which RE2's memory bound does not cover, is built for at
// most maxWordBytes of words: wordset keeps it within wordset.DenseBytes
// plus about 20 bytes per byte of words, so the Core Rule Set's largest
// word list (2,523 Unix commands, 13 KB) fits. Past the bounds a pattern
// gets no filter and RE2 runs, as without one.
const (
	maxPrefilterLiterals = 4096
	maxWordBytes         = 16 << 10
	maxPlain             = 16
)

func totalLen(set []string) int {
	n := 0
	for _, s := range set {
		n += len(s)
	}
	return n
}

// newPrefilter returns nil when the pattern has no set of required literals
// worth checking: one of its matches may be empty or contain no literal
// (an alternative of only classes, a starred group), or the set is too big.
func newPrefilter(expr string) *prefilter {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	lits := required(re.Simplify())
	slices.Sort(lits)
	lits = slices.Compact(lits)
	if len(lits) == 0 || len(lits) > maxPrefilterLiterals {
		return nil
	}
	p := &prefilter{}
	var words []string
	for _, l := range lits {
		switch {
		case len(l) == 1:
			p.single[l[0]] = true
			p.single[strings.ToUpper(l)[0]] = true
			p.hasSingle = true
		case strings.IndexFunc(l, isASCIILetter) < 0:
			p.plain = append(p.plain, l)
		default:
			words = append(words, l)
		}
	}
	if len(p.plain) > maxPlain {
		// Past a few, one pass of the automaton beats a strings.Contains
		// each ("(?:^|[/;\\])\.{2,3}[/;\\]" requires one of 24).
		words, p.plain = append(words, p.plain...), nil
	}
	if totalLen(words) > maxWordBytes {
		return nil
	}
	if len(words) > 0 {
		p.words = wordset.New(words)
	}
	return p
}

func isASCIILetter(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }

// mayMatch reports whether s can match the pattern the filter was built
// from. A nil filter lets everything through.
func (p *prefilter) mayMatch(s string) bool {
	if p == nil || !ascii.Is(s) && foldsToASCII(s) {
		return true
	}
	if p.hasSingle {
		for i := range len(s) {
			if p.single[s[i]] {
				return true
			}
		}
	}
	for _, l := range p.plain {
		if strings.Contains(s, l) {
			return true
		}
	}
	return p.words != nil && p.words.Contains(s)
}

// foldsToASCII reports whether s holds a rune outside ASCII that (?i)
// matches to an ASCII letter: TestFoldsToASCII checks the list against
// Go's Unicode tables.
func foldsToASCII(s string) bool {
	return strings.Contains(s, "\u017f") || strings.Contains(s, "\u212a")
}

// required returns literals one of which every match of re contains,
// lower-cased (the automaton folds ASCII case); nil when it knows of no
// such set.
func required(re *syntax.Regexp) []string {
	return analyse(re).req
}

// facts are what the filter knows of a node: exact, when non-nil, is every
// string the node can match (lower-cased); req, when non-nil, is a set one
// of which every match contains. "" in exact stands for an empty match.
type facts struct {
	exact []string
	req   []string
}

// maxExact bounds the cross products of a concatenation: the CRS's word
// lists are prefix trees ("a(?:pt|wk)"), and whole words filter better
// than their first letters.
const maxExact = 256

func analyse(re *syntax.Regexp) facts {
	switch re.Op {
	case syntax.OpLiteral:
		s := string(re.Rune)
		if ascii := strings.ToLower(longestASCII(s)); len(ascii) != len(s) {
			// Only the ASCII part is required; a subject that matches
			// the rest is not ASCII and skips the filter anyway.
			if ascii == "" {
				return facts{}
			}
			return facts{req: []string{ascii}}
		}
		s = strings.ToLower(s)
		return facts{exact: []string{s}, req: []string{s}}
	case syntax.OpCharClass:
		return charClass(re.Rune)
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return facts{exact: []string{""}}
	case syntax.OpCapture:
		return analyse(re.Sub[0])
	case syntax.OpPlus:
		return facts{req: analyse(re.Sub[0]).req}
	case syntax.OpQuest:
		if sub := analyse(re.Sub[0]); sub.exact != nil && len(sub.exact) < maxExact {
			return facts{exact: union(sub.exact, []string{""})}
		}
		return facts{}
	case syntax.OpConcat:
		return concat(re.Sub)
	case syntax.OpAlternate:
		var f facts
		for i, sub := range re.Sub {
			sf := analyse(sub)
			if i == 0 {
				f = sf
				continue
			}
			f.exact = unionBounded(f.exact, sf.exact, maxExact)
			f.req = appendBounded(f.req, sf.req, maxPrefilterLiterals)
		}
		return f
	}
	// Any character, stars and what Simplify left of repeats can match
	// without any given literal.
	return facts{}
}

func longestASCII(s string) string {
	var best string
	for run := range strings.FieldsFuncSeq(s, func(r rune) bool { return r >= utf8.RuneSelf }) {
		if len(run) > len(best) {
			best = run
		}
	}
	return best
}

// charClass lists the bytes of a small ASCII class ("[Ee]", "[-_]").
func charClass(ranges []rune) facts {
	var set []string
	for i := 0; i < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if hi >= utf8.RuneSelf || hi-lo >= 16 {
			return facts{}
		}
		for r := lo; r <= hi; r++ {
			set = union(set, []string{strings.ToLower(string(r))})
		}
		if len(set) > 16 {
			return facts{}
		}
	}
	return facts{exact: set, req: set}
}

// concat builds whole strings from runs of exact parts and keeps the best
// required set among those runs and the inexact parts.
func concat(subs []*syntax.Regexp) facts {
	var best []string
	run, all := []string{""}, true
	consider := func(set []string) {
		if !slices.Contains(set, "") && better(set, best) {
			best = set
		}
	}
	for _, sub := range subs {
		sf := analyse(sub)
		if sf.exact != nil && len(run)*len(sf.exact) <= maxExact {
			run = cross(run, sf.exact)
			continue
		}
		consider(run)
		consider(sf.req)
		all = false
		run = []string{""}
		if sf.exact != nil {
			run = sf.exact
		}
	}
	consider(run)
	if all {
		return facts{exact: run, req: best}
	}
	return facts{req: best}
}

func cross(a, b []string) []string {
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = union(out, []string{x + y})
		}
	}
	return out
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// unionBounded is union for sets where nil means "unknown": unknown wins,
// and so does a union past max.
func unionBounded(a, b []string, max int) []string {
	if a == nil || b == nil || len(a)+len(b) > max {
		return nil
	}
	return union(slices.Clip(a), b)
}

// appendBounded is append for sets where nil means "unknown": unknown
// wins, and so does a set past max. Duplicates are removed once, when the
// filter is built: removing them here made big alternations quadratic.
func appendBounded(a, b []string, max int) []string {
	if a == nil || b == nil || len(a)+len(b) > max {
		return nil
	}
	return append(slices.Clip(a), b...)
}

// better prefers the set benign text is least likely to contain: letters,
// digits, white space and common punctuation are in almost every argument,
// a rarer byte less often, and a word of three or more bytes seldom.
func better(a, b []string) bool {
	if a == nil {
		return false
	}
	return b == nil || hitCost(a) < hitCost(b)
}

func hitCost(set []string) float64 {
	var c float64
	for _, s := range set {
		switch {
		case len(s) == 1 && strings.Contains(commonBytes, s):
			c += 1
		case len(s) == 1:
			c += 0.2
		case len(s) == 2:
			c += 0.05
		default:
			c += 0.01
		}
	}
	return c
}

const commonBytes = "abcdefghijklmnopqrstuvwxyz0123456789 \t\n\r.,-_:;'\"/()?!"
