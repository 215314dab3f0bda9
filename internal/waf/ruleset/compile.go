package ruleset

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/corazawaf/coraza/v3"
	"github.com/corazawaf/coraza/v3/experimental"
	"github.com/corazawaf/coraza/v3/types"

	"github.com/vilaca/portal/internal/waf/rx"
)

// Options tune Compile.
type Options struct {
	// Configure, when set, adjusts the WAF configuration before the rules are
	// added: the waf-proxy sets its error callback and body limits here. It
	// must not set a root filesystem or add directives.
	Configure func(coraza.WAFConfig) coraza.WAFConfig
	// MaxDataFileBytes bounds each data file that a file operator
	// (@pmFromFile, @ipMatchFromFile, @validateSchema and their aliases)
	// reads: Coraza builds a matcher from the whole file in memory. 0 means
	// DefaultMaxDataFileBytes.
	MaxDataFileBytes int
	// MaxResponseBodyBytes, when positive, clamps SecResponseBodyLimit: a
	// rule set that asks for more (itself or through the Core Rule Set
	// files it includes) gets this limit instead, so no rule set can make
	// the WAF buffer more of one response (see clampResponseBody). The
	// waf-proxy sets it from --max-response-body-bytes.
	MaxResponseBodyBytes int64
}

// DefaultMaxDataFileBytes is the default of Options.MaxDataFileBytes.
const DefaultMaxDataFileBytes = 1 << 20

func (o Options) maxDataFile() int {
	if o.MaxDataFileBytes > 0 {
		return o.MaxDataFileBytes
	}
	return DefaultMaxDataFileBytes
}

// Compiled is a rule set compiled by Coraza.
type Compiled struct {
	// WAF runs the rules. Close the Compiled when done with it.
	WAF coraza.WAF
	// Bundle is what was compiled.
	Bundle Bundle
	// SHA256 is Bundle.SHA256().
	SHA256 string
	// RuleCount is the number of rules (SecRule, SecAction; a chain counts
	// once) in the WAF.
	RuleCount int
	// Weight estimates the memory the WAF holds: the bytes of SecLang Coraza
	// parsed, included Core Rule Set files too, plus the data files.
	Weight int64

	rules    []ruleInfo
	analysis analysis
}

// ruleInfo is what the rule observer saw of one rule.
type ruleInfo struct {
	ID   int
	Tags []string
}

// Close releases what the WAF holds in Coraza's process-wide pattern cache.
// Transactions already running are not affected.
func (c *Compiled) Close() error {
	if cl, ok := c.WAF.(experimental.WAFCloser); ok {
		return cl.Close()
	}
	return nil
}

// Error is why a bundle did not compile.
type Error struct {
	Problems []Problem
}

// Kind is the most serious kind among the problems: KindSandbox, then
// KindTooLarge, then KindTimeout, else KindInvalid.
func (e *Error) Kind() Kind {
	for _, k := range []Kind{KindSandbox, KindTooLarge, KindTimeout} {
		for _, p := range e.Problems {
			if p.Kind == k {
				return k
			}
		}
	}
	return KindInvalid
}

// maxReported is how many problems Error's message lists.
const maxReported = 5

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i == maxReported {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-maxReported)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Compile is CompileContext without a deadline.
func Compile(b Bundle, opts Options) (*Compiled, error) {
	return CompileContext(context.Background(), b, opts)
}

// CompileContext checks b against the sandbox (Check) and compiles it with
// Coraza. The compile sees only b's data files and the embedded Core Rule
// Set, and runs on an engine whose forbidden actions, operators, audit log
// writers and directives refuse to work (engine.go). On failure the error is
// an *Error whose problems locate the failing directive (source and line,
// when b has spans). When ctx ends first, Coraza is stopped at its next file
// read and the error is of KindTimeout.
func CompileContext(ctx context.Context, b Bundle, opts Options) (*Compiled, error) {
	problems, an := check(b, opts)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	opts = opts.clampResponseBody(an.responseLimit)
	if ctx.Err() != nil {
		return nil, timeoutError()
	}
	dir := "rs-" + b.dataDigest()
	var rules []ruleInfo
	g := &guard{}
	leaked := &orphans{}
	waf, err := newWAF(ctx, b, dir, b.Rules, opts, g, leaked, func(r types.RuleMetadata) {
		rules = append(rules, ruleInfo{ID: r.ID(), Tags: r.Tags()})
	})
	if err != nil {
		// After locate, whose compiles of the same rules reuse the patterns.
		defer leaked.release()
		if ctx.Err() != nil {
			return nil, timeoutError()
		}
		return nil, &Error{Problems: []Problem{locate(ctx, b, dir, opts, leaked, err)}}
	}
	c := &Compiled{WAF: waf, Bundle: b, SHA256: b.SHA256(), rules: rules, analysis: an, Weight: g.parsed}
	for _, d := range b.DataFiles {
		c.Weight += int64(len(d))
	}
	if wr, ok := waf.(experimental.WAFWithRules); ok {
		c.RuleCount = wr.RulesCount()
	}
	return c, nil
}

func timeoutError() *Error {
	return &Error{Problems: []Problem{{Kind: KindTimeout,
		Message: "the compile did not finish before its deadline (--waf-compile-timeout); make the rule set smaller or simpler"}}}
}

// newWAF runs Coraza over rules. g, when not nil, is the guard to use (the
// fuzz test records with it). When Coraza fails, the patterns it cached for
// the half-built WAF are recorded in leaked for the caller to release, or
// released at once when leaked is nil.
func newWAF(ctx context.Context, b Bundle, dir, rules string, opts Options, g *guard, leaked *orphans, observe func(types.RuleMetadata)) (w coraza.WAF, err error) {
	cfg := coraza.NewWAFConfig()
	if opts.Configure != nil {
		cfg = opts.Configure(cfg)
	}
	if g == nil {
		g = &guard{}
	}
	cfg = cfg.WithRootFS(newSandboxFS(ctx, dir, chunk(rules), b.DataFiles)).
		WithDirectivesFromFile(dir + "/" + rulesFile).
		WithDebugLogger(g)
	if observe != nil {
		cfg = experimental.WAFConfigWithRuleObserver(cfg, observe)
	}
	g.compiling.Store(true)
	defer g.compiling.Store(false)
	before := lastWAFID()
	defer func() {
		switch r := recover().(type) {
		case nil:
		case *forbiddenDirective:
			w, err = nil, r
		default:
			// No input may crash the controller or the data plane.
			w, err = nil, fmt.Errorf("the Coraza compiler failed on these rules: %v", r)
		}
		if err != nil {
			// Coraza does not close the WAF it failed to build (memo.go).
			if leaked == nil {
				leaked = &orphans{}
				defer leaked.release()
			}
			leaked.add(before, lastWAFID())
		}
	}()
	return coraza.NewWAF(cfg)
}

// Large rules are fed to Coraza in parts, each included from rules.conf,
// because Coraza checks nothing between the directives of one file: the
// sandbox filesystem refuses the next part's read once the deadline passes,
// so a compile past its deadline stops within one part instead of running
// to the end of the rules.
const (
	chunkThreshold = 256 << 10
	minChunk       = 64 << 10
	maxChunks      = 32
	// maxIncludes is Coraza's limit on Include directives in one compile.
	maxIncludes = 100
)

// chunk returns the rule files of a compile, named relative to the bundle
// directory: rules.conf alone, or for large rules, rules.conf including
// part-0.conf, part-1.conf... cut at directive boundaries, so every part
// parses as the same directives did in one file.
func chunk(rules string) map[string]string {
	if len(rules) <= chunkThreshold {
		return map[string]string{rulesFile: rules}
	}
	dirs, _ := split(rules, 1)
	includes := 0
	for _, d := range dirs {
		if d.Name == "include" {
			includes++
		}
	}
	n := min(maxChunks, maxIncludes-1-includes)
	if n < 2 {
		return map[string]string{rulesFile: rules}
	}
	target := max(len(rules)/n+1, minChunk)
	// ends[i] is the offset just after line i+1.
	ends := make([]int, 0, strings.Count(rules, "\n")+1)
	for off := 0; off < len(rules); {
		i := strings.IndexByte(rules[off:], '\n')
		if i < 0 {
			off = len(rules)
		} else {
			off += i + 1
		}
		ends = append(ends, off)
	}
	files := map[string]string{}
	var index strings.Builder
	start := 0
	cut := func(end int) {
		name := fmt.Sprintf("part-%d.conf", len(files))
		files[name] = rules[start:end]
		fmt.Fprintf(&index, "Include %s\n", name)
		start = end
	}
	for _, d := range dirs {
		if end := ends[d.End-1]; end-start >= target {
			cut(end)
		}
	}
	if start < len(rules) {
		cut(len(rules))
	}
	files[rulesFile] = index.String()
	return files
}

// parseErrorPrefix starts the errors Coraza returns for a directive that does
// not parse, as opposed to a setting it rejects once every directive is read.
const parseErrorPrefix = "invalid WAF config from file: "

// auditErrorPrefix starts the error Coraza returns when the audit log writer
// refuses its settings, once every directive is read.
const auditErrorPrefix = "invalid WAF config from audit log: "

// maxLocateCompiles bounds the compiles spent finding a failing directive.
const maxLocateCompiles = 24

// locate turns a Coraza error into a Problem on the directive that caused
// it. Coraza's errors carry no line, and it stops at the first directive
// that fails, so the failing directive is the first one whose prefix of the
// rules fails to compile: found by bisection, one compile per step, while ctx
// lasts.
func locate(ctx context.Context, b Bundle, dir string, opts Options, leaked *orphans, err error) Problem {
	msg := cleanError(err)
	p := Problem{Kind: KindInvalid, Message: msg}
	var fd *forbiddenDirective
	if strings.Contains(msg, refusal) || errors.As(err, &fd) {
		p.Kind = KindSandbox
	} else if strings.Contains(msg, rx.ErrTooLarge.Error()) {
		p.Kind = KindTooLarge
	}
	if fd == nil && !strings.HasPrefix(err.Error(), parseErrorPrefix) && !strings.HasPrefix(err.Error(), auditErrorPrefix) {
		return p
	}
	dirs, _ := splitBundle(b)
	if len(dirs) == 0 {
		return p
	}
	lines := strings.SplitAfter(b.Rules, "\n")
	fails := func(i int) bool {
		w, err := newWAF(ctx, b, dir, strings.Join(lines[:dirs[i].End], ""), opts, nil, leaked, nil)
		if err != nil {
			return true
		}
		if cl, ok := w.(experimental.WAFCloser); ok {
			_ = cl.Close()
		}
		return false
	}
	lo, hi := 0, len(dirs)-1 // the prefix ending at hi fails
	for n := 0; lo < hi && n < maxLocateCompiles && ctx.Err() == nil; n++ {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo != hi || ctx.Err() != nil {
		return p
	}
	d := dirs[hi]
	p.Line, p.Directive = d.Line, d.Name
	p.Source, p.SourceLine = b.Locate(d.Line)
	if unclosedQuote(d.Text) {
		// Coraza only says the actions are invalid, quoting the rule.
		p.Message = "a double quote is never closed in this directive (each of the variables, operator and actions arguments is quoted on its own, and a rule continued on the next line needs a \\ at the end of the line); Coraza says: " + p.Message
	}
	return p
}

// unclosedQuote reports whether text has an odd number of double quotes
// that no backslash escapes.
func unclosedQuote(text string) bool {
	n, escaped := 0, false
	for i := 0; i < len(text); i++ {
		switch {
		case escaped:
			escaped = false
		case text[i] == '\\':
			escaped = true
		case text[i] == '"':
			n++
		}
	}
	return n%2 == 1
}

// cleanError drops the wrappers Coraza puts around a directive's error.
func cleanError(err error) string {
	msg := err.Error()
	for _, prefix := range []string{parseErrorPrefix, auditErrorPrefix} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	// One wrapper per file: rules.conf and, for large rules, the part.
	for strings.HasPrefix(msg, "failed to parse string: ") {
		msg = strings.TrimPrefix(msg, "failed to parse string: ")
	}
	return msg
}

// AsError returns err as an *Error, if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
