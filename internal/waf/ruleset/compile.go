package ruleset

import (
	"errors"
	"fmt"
	"strings"

	"github.com/corazawaf/coraza/v3"
	"github.com/corazawaf/coraza/v3/experimental"
	"github.com/corazawaf/coraza/v3/types"
)

// Options tune Compile.
type Options struct {
	// Configure, when set, adjusts the WAF configuration before the rules are
	// added: the waf-proxy sets its error callback and body limits here. It
	// must not set a root filesystem or add directives.
	Configure func(coraza.WAFConfig) coraza.WAFConfig
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

// Kind is KindSandbox when any problem is a sandbox violation, else
// KindInvalid.
func (e *Error) Kind() Kind {
	for _, p := range e.Problems {
		if p.Kind == KindSandbox {
			return KindSandbox
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

// Compile checks b against the sandbox (Check) and compiles it with Coraza.
// The compile sees only b's data files and the embedded Core Rule Set. On
// failure the error is an *Error whose problems locate the failing directive
// (source and line, when b has spans).
func Compile(b Bundle, opts Options) (*Compiled, error) {
	problems, an := check(b)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	dir := "rs-" + b.dataDigest()
	var rules []ruleInfo
	waf, err := newWAF(b, dir, b.Rules, opts, func(r types.RuleMetadata) {
		rules = append(rules, ruleInfo{ID: r.ID(), Tags: r.Tags()})
	})
	if err != nil {
		return nil, &Error{Problems: []Problem{locate(b, dir, opts, err)}}
	}
	c := &Compiled{WAF: waf, Bundle: b, SHA256: b.SHA256(), rules: rules, analysis: an}
	if wr, ok := waf.(experimental.WAFWithRules); ok {
		c.RuleCount = wr.RulesCount()
	}
	return c, nil
}

func newWAF(b Bundle, dir, rules string, opts Options, observe func(types.RuleMetadata)) (coraza.WAF, error) {
	cfg := coraza.NewWAFConfig()
	if opts.Configure != nil {
		cfg = opts.Configure(cfg)
	}
	cfg = cfg.WithRootFS(newSandboxFS(dir, rules, b.DataFiles)).WithDirectivesFromFile(dir + "/" + rulesFile)
	if observe != nil {
		cfg = experimental.WAFConfigWithRuleObserver(cfg, observe)
	}
	return coraza.NewWAF(cfg)
}

// parseErrorPrefix starts the errors Coraza returns for a directive that does
// not parse, as opposed to a setting it rejects once every directive is read.
const parseErrorPrefix = "invalid WAF config from file: "

// maxLocateCompiles bounds the compiles spent finding a failing directive.
const maxLocateCompiles = 24

// locate turns a Coraza error into a Problem on the directive that caused
// it. Coraza's errors carry no line, and it stops at the first directive
// that fails, so the failing directive is the first one whose prefix of the
// rules fails to compile: found by bisection, one compile per step.
func locate(b Bundle, dir string, opts Options, err error) Problem {
	msg := cleanError(err)
	p := Problem{Kind: KindInvalid, Message: msg}
	if !strings.HasPrefix(err.Error(), parseErrorPrefix) {
		return p
	}
	dirs, _ := split(b.Rules)
	if len(dirs) == 0 {
		return p
	}
	lines := strings.SplitAfter(b.Rules, "\n")
	fails := func(i int) bool {
		w, err := newWAF(b, dir, strings.Join(lines[:dirs[i].End], ""), opts, nil)
		if err != nil {
			return true
		}
		if cl, ok := w.(experimental.WAFCloser); ok {
			_ = cl.Close()
		}
		return false
	}
	lo, hi := 0, len(dirs)-1 // the prefix ending at hi fails
	for n := 0; lo < hi && n < maxLocateCompiles; n++ {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo != hi {
		return p
	}
	d := dirs[hi]
	p.Line, p.Directive = d.Line, d.Name
	p.Source, p.SourceLine = b.Locate(d.Line)
	return p
}

// cleanError drops the wrappers Coraza puts around a directive's error.
func cleanError(err error) string {
	msg := err.Error()
	for _, prefix := range []string{parseErrorPrefix, "failed to parse string: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return msg
}

// AsError returns err as an *Error, if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
