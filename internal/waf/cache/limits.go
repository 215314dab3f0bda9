package cache

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
)

// Bounds of the regular expressions of a route table. A data plane tries a
// request against the rows in order until one matches, and Go's regexp
// costs up to (instructions of the program) x (bytes of the input) for
// each: a few rows of `(.*a){50}q` on a 60 KB path took seconds. The
// binding controller leaves out of a table the routes that would pass
// these bounds, and the waf-proxy refuses a table that passes them, so a
// request meets at most MaxHostRegexInsts instructions, each run over an
// input the waf-proxy bounds too (8 KiB): a request's routing costs at
// most MaxHostRegexInsts x 8 KiB regex steps.
const (
	// MaxRegexBytes is the longest regular expression of a match.
	MaxRegexBytes = 1024
	// MaxRegexInsts is the most instructions the program of one regular
	// expression may have: Go's regexp/syntax program of the expression
	// anchored at both ends, as the data plane runs it.
	MaxRegexInsts = 256
	// MaxHostRegexInsts is the most instructions the regular expressions
	// of the rows one request can be tried against may have together: the
	// rows of its hostname, every row of a wildcard hostname and every row
	// without one.
	MaxHostRegexInsts = 1024
)

// Match types of a row, as Gateway API names them.
const (
	MatchExact      = "Exact"
	MatchPathPrefix = "PathPrefix"
	MatchRegex      = "RegularExpression"
)

// ErrUnsupportedMatch is wrapped by the error of a match a data plane does
// not run: an unknown type, or a regular expression that does not parse
// or passes MaxRegexBytes or MaxRegexInsts.
var ErrUnsupportedMatch = errors.New("unsupported match")

// AnchoredRegex is a match's regular expression as the data plane runs it:
// it must match the whole value.
func AnchoredRegex(expr string) string { return `^(?:` + expr + `)$` }

// RegexInsts checks a match's regular expression and returns the number
// of instructions of its program.
func RegexInsts(expr string) (int, error) {
	if len(expr) > MaxRegexBytes {
		return 0, fmt.Errorf("%w: regular expression of %d bytes, at most %d", ErrUnsupportedMatch, len(expr), MaxRegexBytes)
	}
	// As regexp.Compile builds it: Perl flags, simplified.
	re, err := syntax.Parse(AnchoredRegex(expr), syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("%w: regular expression %q: %w", ErrUnsupportedMatch, expr, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, fmt.Errorf("%w: regular expression %q: %w", ErrUnsupportedMatch, expr, err)
	}
	if n := len(prog.Inst); n > MaxRegexInsts {
		return 0, fmt.Errorf("%w: regular expression %q compiles to %d instructions, at most %d", ErrUnsupportedMatch, expr, n, MaxRegexInsts)
	}
	return len(prog.Inst), nil
}

// RowInsts checks a row's matches and returns the instructions of its
// regular expressions together.
func RowInsts(r TableRow) (int, error) {
	total := 0
	check := func(what string, m StringMatch, path bool) error {
		switch {
		case m.Type == MatchExact, m.Type == MatchPathPrefix && path:
			return nil
		case m.Type == MatchRegex:
			n, err := RegexInsts(m.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			total += n
			return nil
		}
		return fmt.Errorf("%s: %w: type %q", what, ErrUnsupportedMatch, m.Type)
	}
	if r.Path != nil {
		if err := check("path", *r.Path, true); err != nil {
			return 0, err
		}
	}
	for _, h := range r.Headers {
		if err := check("header "+h.Name, h, false); err != nil {
			return 0, err
		}
	}
	for _, q := range r.Query {
		if err := check("query parameter "+q.Name, q, false); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// RegexLoad adds up, as rows are added to a table, the regex instructions
// a request can meet: those of the rows of its hostname, of the rows of
// wildcard hostnames and of the rows without a hostname. Wildcard rows
// are counted together whatever their suffix, which is simpler than
// tracking which wildcards one host can match, and errs on the safe side.
type RegexLoad struct {
	anyHost, wildcard int
	// exact is per exact hostname; maxHost has the most.
	exact    map[string]int
	maxHost  string
	maxExact int
}

// Add counts insts instructions in rows for each of hostnames (none: rows
// for any host), unless a request host would then meet more than
// MaxHostRegexInsts: then it counts nothing and returns an error wrapping
// ErrTableTooLarge that names the host.
func (l *RegexLoad) Add(hostnames []string, insts int) error {
	if insts == 0 {
		return nil
	}
	anyHost, wildcard, maxHost, maxExact := l.anyHost, l.wildcard, l.maxHost, l.maxExact
	exact := map[string]int{}
	if len(hostnames) == 0 {
		anyHost += insts
	}
	for _, h := range hostnames {
		h = strings.ToLower(h)
		switch {
		case h == "":
			anyHost += insts
		case strings.HasPrefix(h, "*"):
			wildcard += insts
		default:
			if _, ok := exact[h]; !ok {
				exact[h] = l.exact[h]
			}
			exact[h] += insts
			if exact[h] > maxExact {
				maxHost, maxExact = h, exact[h]
			}
		}
	}
	if total := anyHost + wildcard + maxExact; total > MaxHostRegexInsts {
		where := "a request to any host"
		if maxHost != "" {
			where = "a request to " + maxHost
		}
		return fmt.Errorf("%w: the regular expressions %s is tried against would have %d instructions together, at most %d",
			ErrTableTooLarge, where, total, MaxHostRegexInsts)
	}
	l.anyHost, l.wildcard, l.maxHost, l.maxExact = anyHost, wildcard, maxHost, maxExact
	if l.exact == nil {
		l.exact = map[string]int{}
	}
	for h, n := range exact {
		l.exact[h] = n
	}
	return nil
}
