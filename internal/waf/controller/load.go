package controller

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// rejection is why a RuleSet is not compiled at all: a status reason, the
// result label of the compiles metric, and a message that says what to fix.
type rejection struct {
	reason, result, message string
}

// load reads the RuleSet's sources and data in order and joins them. What
// stops a RuleSet before any compile is a rejection, not an error: a name
// listed twice (DuplicateReference), a missing object (RuleSourceNotFound,
// RuleDataNotFound), or inputs larger than MaxRuleSetBytes (TooLarge),
// counted from the objects' sizes before anything is joined or copied.
func (c *Compiler) load(ctx context.Context, rs *wafv1alpha1.RuleSet) (ruleset.Bundle, *rejection, error) {
	if rej := duplicates(rs); rej != nil {
		return ruleset.Bundle{}, rej, nil
	}
	var (
		sources []ruleset.Source
		missing []string
		sizes   []sized
	)
	for _, ref := range rs.Spec.Sources {
		var src wafv1alpha1.RuleSource
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: ref.Name}, &src); err != nil {
			if !apierrors.IsNotFound(err) {
				return ruleset.Bundle{}, nil, fmt.Errorf("get RuleSource %s/%s: %w", rs.Namespace, ref.Name, err)
			}
			missing = append(missing, ref.Name)
			continue
		}
		sources = append(sources, ruleset.Source{Name: ref.Name, Rules: src.Spec.Rules})
		sizes = append(sizes, sized{"RuleSource " + ref.Name, int64(len(src.Spec.Rules)) + 1})
	}
	if len(missing) > 0 {
		return ruleset.Bundle{}, notFound(wafv1alpha1.ReasonRuleSourceNotFound, "RuleSource", rs.Namespace, missing), nil
	}
	var data []wafv1alpha1.RuleData
	for _, ref := range rs.Spec.Data {
		var d wafv1alpha1.RuleData
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: ref.Name}, &d); err != nil {
			if !apierrors.IsNotFound(err) {
				return ruleset.Bundle{}, nil, fmt.Errorf("get RuleData %s/%s: %w", rs.Namespace, ref.Name, err)
			}
			missing = append(missing, ref.Name)
			continue
		}
		var n int64
		for name, content := range d.Spec.Files {
			n += int64(len(name) + len(content))
		}
		data = append(data, d)
		sizes = append(sizes, sized{"RuleData " + ref.Name, n})
	}
	if len(missing) > 0 {
		return ruleset.Bundle{}, notFound(wafv1alpha1.ReasonRuleDataNotFound, "RuleData", rs.Namespace, missing), nil
	}
	if rej := c.tooLarge(sizes); rej != nil {
		return ruleset.Bundle{}, rej, nil
	}
	files := make([]map[string][]byte, 0, len(data))
	for _, d := range data {
		m := make(map[string][]byte, len(d.Spec.Files))
		for name, content := range d.Spec.Files {
			m[name] = []byte(content)
		}
		files = append(files, m)
	}
	return ruleset.Join(sources, files...), nil, nil
}

// sized is one input of a RuleSet and its bytes.
type sized struct {
	what  string
	bytes int64
}

// tooLarge rejects inputs over MaxRuleSetBytes, naming the largest.
func (c *Compiler) tooLarge(sizes []sized) *rejection {
	var total int64
	largest := sized{}
	for _, s := range sizes {
		total += s.bytes
		if s.bytes > largest.bytes {
			largest = s
		}
	}
	if total <= c.opts.MaxRuleSetBytes {
		return nil
	}
	return &rejection{wafv1alpha1.ReasonTooLarge, ResultTooLarge, fmt.Sprintf(
		"the RuleSet's sources and data files hold %d bytes together; Portal compiles at most %d (--waf-max-ruleset-bytes); the largest input is %s (%d bytes): split the rule set or trim its inputs",
		total, c.opts.MaxRuleSetBytes, largest.what, largest.bytes)}
}

// duplicates rejects a RuleSet that names a RuleSource or RuleData twice. The
// API server refuses such lists (they are maps keyed by name); this covers
// objects stored before that rule, and keeps one large source listed many
// times from being joined many times.
func duplicates(rs *wafv1alpha1.RuleSet) *rejection {
	check := func(field, kind string, names []string) *rejection {
		first := make(map[string]int, len(names))
		for i, n := range names {
			if j, seen := first[n]; seen {
				return &rejection{wafv1alpha1.ReasonDuplicateReference, ResultDuplicate, fmt.Sprintf(
					"%s names %s %q more than once (entries %d and %d): list each %s once", field, kind, n, j, i, kind)}
			}
			first[n] = i
		}
		return nil
	}
	names := make([]string, 0, len(rs.Spec.Sources))
	for _, s := range rs.Spec.Sources {
		names = append(names, s.Name)
	}
	if rej := check("spec.sources", "RuleSource", names); rej != nil {
		return rej
	}
	names = names[:0]
	for _, d := range rs.Spec.Data {
		names = append(names, d.Name)
	}
	return check("spec.data", "RuleData", names)
}

func notFound(reason, kind, namespace string, names []string) *rejection {
	return &rejection{reason, ResultMissingRefs, fmt.Sprintf("%s not found in namespace %s: %s", kind, namespace, strings.Join(names, ", "))}
}
