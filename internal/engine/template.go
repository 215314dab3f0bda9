package engine

import (
	"context"
	"errors"
	"fmt"
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
	holes := 0
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
		if holes++; holes > MaxMessageHoles {
			at := utf8.RuneCountInString(msg[:pos+start])
			return nil, &core.CompileError{Field: "message", Offset: at, Err: fmt.Errorf("hole %d: a message may have at most %d {{ }} holes", holes, MaxMessageHoles)}
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
// reported. The message keeps MaxMessageBytes, each hole MaxHoleBytes; the
// holes after a full message are not evaluated. budgetErr is the first
// budget error a hole ran into, so it counts like the expression's own.
func (t template) render(ctx context.Context, env core.Env, fallback string, acct *core.Account) (msgText string, budgetErr error) {
	if len(t) == 0 {
		return fallback, nil
	}
	if len(t) == 1 && t[0].prog == nil && len(t[0].text) <= MaxMessageBytes {
		return t[0].text, nil
	}
	msg := capped{max: MaxMessageBytes}
	for _, s := range t {
		if msg.cut {
			break
		}
		if s.prog == nil {
			msg.WriteString(s.text)
			continue
		}
		hole := capped{max: MaxHoleBytes}
		v, err := s.prog.EvalShared(ctx, env, acct)
		if err != nil {
			if budgetErr == nil && errors.Is(err, core.ErrBudgetExceeded) {
				budgetErr = err
			}
			hole.WriteString("<error: ")
			hole.WriteString(err.Error())
			hole.WriteString(">")
		} else {
			printValue(&hole, v)
		}
		msg.WriteString(hole.String())
	}
	return msg.String(), budgetErr
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
