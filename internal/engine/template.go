package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vilaca/portal/internal/core"
)

// template is a rule message with {{ expression }} holes, compiled once.
type template []segment

type segment struct {
	text string
	prog core.Program
}

// compileTemplate compiles the holes of msg, each also passed to check.
func compileTemplate(eng core.ExpressionEngine, msg string, check func(core.Program) error) (template, error) {
	var t template
	for pos := 0; pos < len(msg); {
		s := msg[pos:]
		start := strings.Index(s, "{{")
		if start < 0 {
			t = append(t, segment{text: s})
			break
		}
		end := strings.Index(s[start:], "}}")
		if end < 0 {
			at := utf8.RuneCountInString(msg[:pos+start])
			return nil, &core.CompileError{Field: "message", Offset: at, Err: fmt.Errorf("unclosed {{ at character %d: close it with }}", at+1)}
		}
		if start > 0 {
			t = append(t, segment{text: s[:start]})
		}
		inner := s[start+2 : start+end]
		src := strings.TrimSpace(inner)
		p, err := eng.Compile(src)
		if err == nil {
			err = check(p)
		}
		if err != nil {
			lead := len(inner) - len(strings.TrimLeft(inner, " \t\n"))
			at := utf8.RuneCountInString(msg[:pos+start+2+lead])
			return nil, fmt.Errorf("{{ %s }}: %w", src, inField("message", at, err))
		}
		t = append(t, segment{prog: p})
		pos += start + end + 2
	}
	return t, nil
}

// inField places an expression's compile error in the rule field it came
// from, base runes into that field's value.
func inField(field string, base int, err error) error {
	ce, ok := errors.AsType[*core.CompileError](err)
	if !ok {
		return &core.CompileError{Field: field, Offset: base, Err: err}
	}
	off := base
	if ce.Offset >= 0 {
		off += ce.Offset
	}
	return &core.CompileError{Field: field, Offset: off, Err: ce.Err}
}

// render fills the holes from env, drawing on acct, the budget the rule's
// expression spent from; an empty template renders as fallback. A hole that
// fails to evaluate renders as <error: ...> so the violation is still
// reported.
func (t template) render(ctx context.Context, env core.Env, fallback string, acct *core.Account) string {
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
		v, err := s.prog.EvalShared(ctx, env, acct)
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

// lookups lists the cluster.* reads the holes make.
func (t template) lookups() []core.Lookup {
	var out []core.Lookup
	for _, s := range t {
		if s.prog != nil {
			out = append(out, lookupsOf(s.prog)...)
		}
	}
	return out
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
