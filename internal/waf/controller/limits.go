package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vilaca/portal/internal/waf/ruleset"
)

// CompilerOptions bound what the Compiler spends on RuleSets, so that one
// namespace's rule sets cannot make Portal slow or big for the others.
type CompilerOptions struct {
	// MaxRuleSetBytes bounds a RuleSet's inputs: its sources' rules and its
	// data files together, counted before they are joined
	// (--waf-max-ruleset-bytes). Over it: reason TooLarge.
	MaxRuleSetBytes int64
	// MaxDataFileBytes bounds each data file a file operator reads
	// (--waf-max-data-file-bytes). Over it: reason TooLarge.
	MaxDataFileBytes int
	// CompileTimeout is the deadline of one compile (--waf-compile-timeout).
	// Past it: reason CompileTimeout.
	CompileTimeout time.Duration
	// Concurrency is how many RuleSets compile at once
	// (--waf-compile-concurrency). One namespace uses at most half of them,
	// and at least one.
	Concurrency int
	// MaxLastGoodBytes bounds the weight (ruleset.Compiled.Weight) of the
	// last good WAFs kept open (--waf-max-last-good-bytes); the oldest are
	// closed first.
	MaxLastGoodBytes int64
	// Compile compiles a bundle: ruleset.CompileContext when nil. Tests wrap
	// it to hold a compile.
	Compile func(context.Context, ruleset.Bundle, ruleset.Options) (*ruleset.Compiled, error)
}

// Defaults of CompilerOptions.
const (
	DefaultMaxRuleSetBytes  = 4 << 20
	DefaultCompileTimeout   = 30 * time.Second
	DefaultConcurrency      = 2
	DefaultMaxLastGoodBytes = 128 << 20
)

// DefaultCompilerOptions are the defaults of the flags.
func DefaultCompilerOptions() CompilerOptions {
	return CompilerOptions{
		MaxRuleSetBytes:  DefaultMaxRuleSetBytes,
		MaxDataFileBytes: ruleset.DefaultMaxDataFileBytes,
		CompileTimeout:   DefaultCompileTimeout,
		Concurrency:      DefaultConcurrency,
		MaxLastGoodBytes: DefaultMaxLastGoodBytes,
	}
}

func (o CompilerOptions) withDefaults() CompilerOptions {
	d := DefaultCompilerOptions()
	if o.MaxRuleSetBytes <= 0 {
		o.MaxRuleSetBytes = d.MaxRuleSetBytes
	}
	if o.MaxDataFileBytes <= 0 {
		o.MaxDataFileBytes = d.MaxDataFileBytes
	}
	if o.CompileTimeout <= 0 {
		o.CompileTimeout = d.CompileTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = d.Concurrency
	}
	if o.MaxLastGoodBytes < 0 {
		o.MaxLastGoodBytes = 0
	} else if o.MaxLastGoodBytes == 0 {
		o.MaxLastGoodBytes = d.MaxLastGoodBytes
	}
	if o.Compile == nil {
		o.Compile = ruleset.CompileContext
	}
	return o
}

// slots are the compile slots: at most total compiles at once, and at most
// perNamespace of them for one namespace.
type slots struct {
	mu           sync.Mutex
	total, used  int
	perNamespace int
	byNamespace  map[string]int
}

func newSlots(total int) *slots {
	return &slots{total: total, perNamespace: max(1, total/2), byNamespace: map[string]int{}}
}

// acquire takes a slot for a compile in namespace, if one is free; release
// gives it back.
func (s *slots) acquire(namespace string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= s.total || s.byNamespace[namespace] >= s.perNamespace {
		return nil, false
	}
	s.used++
	s.byNamespace[namespace]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.used--
			if s.byNamespace[namespace]--; s.byNamespace[namespace] == 0 {
				delete(s.byNamespace, namespace)
			}
		})
	}, true
}

// lastGood holds the last good WAF of each RuleSet while their total weight
// stays within limit. The caller holds the Compiler's lock.
type lastGood struct {
	limit   int64
	bytes   int64
	order   []types.NamespacedName // oldest first
	wafs    map[types.NamespacedName]*ruleset.Compiled
	metrics *Metrics
}

func newLastGood(limit int64, m *Metrics) *lastGood {
	return &lastGood{limit: limit, wafs: map[types.NamespacedName]*ruleset.Compiled{}, metrics: m}
}

// keep makes c the kept WAF of key and returns the WAFs to close: key's
// previous one, the oldest others while over the limit, or c itself when it
// alone is over the limit.
func (l *lastGood) keep(key types.NamespacedName, c *ruleset.Compiled) []*ruleset.Compiled {
	var closing []*ruleset.Compiled
	if old := l.drop(key); old != nil {
		closing = append(closing, old)
	}
	if c.Weight > l.limit {
		closing = append(closing, c)
		l.publish()
		return closing
	}
	for l.bytes+c.Weight > l.limit && len(l.order) > 0 {
		closing = append(closing, l.drop(l.order[0]))
	}
	l.wafs[key] = c
	l.order = append(l.order, key)
	l.bytes += c.Weight
	l.publish()
	return closing
}

// drop forgets key's WAF and returns it for closing, if there was one.
func (l *lastGood) drop(key types.NamespacedName) *ruleset.Compiled {
	c, ok := l.wafs[key]
	if !ok {
		return nil
	}
	delete(l.wafs, key)
	if i := slices.Index(l.order, key); i >= 0 {
		l.order = slices.Delete(l.order, i, i+1)
	}
	l.bytes -= c.Weight
	l.publish()
	return c
}

func (l *lastGood) publish() {
	l.metrics.LastGoodBytes.Set(float64(l.bytes))
	l.metrics.LastGoodWAFs.Set(float64(len(l.wafs)))
}
