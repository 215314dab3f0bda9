package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/vilaca/portal/internal/core"
)

// template is a rule message with {{ expression }} holes, compiled once.
type template []segment

type segment struct {
	text string
	prog core.Program
}

func compileTemplate(eng core.ExpressionEngine, s string) (template, error) {
	var t template
	for s != "" {
		start := strings.Index(s, "{{")
		if start < 0 {
			t = append(t, segment{text: s})
			break
		}
		end := strings.Index(s[start:], "}}")
		if end < 0 {
			return nil, fmt.Errorf("unclosed {{ at offset %d", start)
		}
		if start > 0 {
			t = append(t, segment{text: s[:start]})
		}
		src := strings.TrimSpace(s[start+2 : start+end])
		p, err := eng.Compile(src)
		if err != nil {
			return nil, fmt.Errorf("{{ %s }}: %w", src, err)
		}
		t = append(t, segment{prog: p})
		s = s[start+end+2:]
	}
	return t, nil
}

// render fills the holes from env; an empty template renders as fallback. A
// hole that fails to evaluate renders as <error: ...> so the violation is
// still reported.
func (t template) render(ctx context.Context, env core.Env, fallback string) string {
	if len(t) == 0 {
		return fallback
	}
	if len(t) == 1 && t[0].prog == nil {
		return t[0].text
	}
	var b strings.Builder
	for _, s := range t {
		if s.prog == nil {
			b.WriteString(s.text)
			continue
		}
		v, err := s.prog.Eval(ctx, env)
		switch {
		case err != nil:
			fmt.Fprintf(&b, "<error: %v>", err)
		case v == nil:
			b.WriteString("<nil>")
		default:
			writeValue(&b, v)
		}
	}
	return b.String()
}

// identifiers lists the environment names the holes read.
func (t template) identifiers() []string {
	var ids []string
	for _, s := range t {
		if s.prog != nil {
			ids = append(ids, s.prog.Identifiers()...)
		}
	}
	return ids
}

// writeValue prints numbers as people write them: YAML numbers decode as
// float64, and 1073741824 reads better than 1.073741824e+09.
func writeValue(b *strings.Builder, v any) {
	if f, ok := v.(float64); ok {
		b.WriteString(strconv.FormatFloat(f, 'f', -1, 64))
		return
	}
	fmt.Fprint(b, v)
}
