package ruleset

import (
	"fmt"
	"strings"
)

// MaxLineLength is the longest physical line accepted, in bytes. Coraza reads
// rules with a bufio.Scanner, which stops at a longer line without an error,
// so every directive after it would be dropped silently.
const MaxLineLength = 65535

// directive is one logical SecLang directive as Coraza's parser sees it:
// comment lines skipped, continuation lines joined, backtick blocks kept.
type directive struct {
	// Line and End are the bundle lines (1-based) it starts and ends on.
	Line, End int
	// Name is the directive name, lower-cased ("secrule"); Word is the name
	// as written ("SecRule").
	Name, Word string
	// Opts is everything after the name, with surrounding double quotes
	// removed the way Coraza removes them.
	Opts string
}

// split cuts rules into directives, mirroring Coraza's parser (seclang
// Parser.parseString and evaluateLine), and reports what that parser would
// silently drop or refuse.
func split(rules string) ([]directive, []Problem) {
	var (
		out      []directive
		problems []Problem
		buf      strings.Builder
		start    int
		inTicks  bool
	)
	lines := strings.Split(rules, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	for i, raw := range lines {
		n := i + 1
		raw = strings.TrimSuffix(raw, "\r")
		if len(raw) > MaxLineLength {
			problems = append(problems, Problem{Kind: KindInvalid, Line: n,
				Message: fmt.Sprintf("line is %d bytes long; the limit is %d (Coraza's parser would silently drop every rule after it)", len(raw), MaxLineLength)})
			return out, problems
		}
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' {
			continue
		}
		if start == 0 {
			start = n
		}
		last := line[len(line)-1]
		if !inTicks && last == '`' {
			inTicks = true
		} else if inTicks && line[0] == '`' {
			inTicks = false
		}
		if inTicks {
			buf.WriteString(line)
			buf.WriteByte('\n')
			continue
		}
		if last == '\\' {
			buf.WriteString(line[:len(line)-1])
			continue
		}
		buf.WriteString(line)
		out = append(out, newDirective(buf.String(), start, n))
		buf.Reset()
		start = 0
	}
	switch {
	case inTicks:
		problems = append(problems, Problem{Kind: KindInvalid, Line: start, Message: "backtick block is never closed"})
	case start != 0:
		problems = append(problems, Problem{Kind: KindInvalid, Line: start,
			Message: "the last directive ends with a line continuation (\\); Coraza would silently ignore it"})
	}
	return out, problems
}

func newDirective(text string, line, end int) directive {
	name, opts, _ := strings.Cut(text, " ")
	if len(opts) >= 3 && opts[0] == '"' && opts[len(opts)-1] == '"' {
		opts = strings.Trim(opts, `"`)
	}
	return directive{Line: line, End: end, Name: strings.ToLower(name), Word: name, Opts: opts}
}

// ruleParts splits the arguments of a SecRule into variables, operator and
// actions as Coraza does (seclang parseActionOperator). ok is false when
// Coraza would reject the rule's shape, which compiling then reports.
func ruleParts(opts string) (vars, op, actions string, ok bool) {
	data := strings.Trim(opts, " ")
	vars, rest, found := strings.Cut(data, " ")
	if !found {
		return "", "", "", false
	}
	rest = strings.TrimLeft(rest, " ")
	op, rest, found = cutQuoted(rest)
	if !found {
		return "", "", "", false
	}
	op = unescapeQuotes(maybeUnquote(op))
	rest = strings.TrimLeft(rest, " ")
	if rest == "" {
		return vars, op, "", true
	}
	if len(rest) < 2 || rest[0] != '"' || rest[len(rest)-1] != '"' {
		return "", "", "", false
	}
	return vars, op, maybeUnquote(rest), true
}

// cutQuoted cuts a leading double-quoted string, honouring backslash escapes
// of the quote (seclang cutQuotedString).
func cutQuoted(s string) (quoted, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	escapes := 0
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			escapes++
		case s[i] != '"':
			escapes = 0
		case escapes%2 == 1:
			escapes = 0
		default:
			return s[:i+1], s[i+1:], true
		}
	}
	return "", "", false
}

func maybeUnquote(s string) string {
	if len(s) < 2 {
		return s
	}
	if (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

func unescapeQuotes(s string) string { return strings.ReplaceAll(s, `\"`, `"`) }

// operatorOf returns the operator name and its argument, as Coraza's
// RuleParser.ParseOperator reads them: no operator means @rx.
func operatorOf(op string) (name, arg string) {
	switch {
	case op == "" || op[0] != '@' && op[0] != '!':
		return "rx", strings.TrimSpace(op)
	case op == "!":
		return "rx", ""
	case op[0] == '!' && op[1] != '@':
		return "rx", strings.TrimSpace(op[1:])
	}
	raw, data, _ := strings.Cut(op, " ")
	raw = strings.TrimSpace(raw)
	raw = strings.TrimPrefix(strings.TrimPrefix(raw, "!"), "@")
	return raw, strings.TrimSpace(data)
}

// action is one key:value of an action list.
type action struct{ Key, Value string }

// actionsOf splits an action list on commas outside single quotes, as
// Coraza's parseActions does, with keys lower-cased and values unquoted.
func actionsOf(list string) []action {
	var out []action
	beforeKey, afterKey := -1, -1
	inQuotes := false
	add := func(end int) {
		var val string
		if afterKey == -1 {
			afterKey = end
		} else {
			val = list[afterKey+1 : end]
		}
		out = append(out, action{
			Key:   strings.ToLower(strings.TrimSpace(list[beforeKey+1 : afterKey])),
			Value: maybeUnquote(strings.TrimSpace(val)),
		})
	}
	for i := 1; i < len(list); i++ {
		c := list[i]
		if list[i-1] == '\\' {
			continue
		}
		if c == '\'' {
			inQuotes = !inQuotes
			continue
		}
		if inQuotes {
			continue
		}
		switch c {
		case ':':
			if afterKey == -1 {
				afterKey = i
			}
		case ',':
			add(i)
			beforeKey, afterKey = i, -1
		}
	}
	if list != "" {
		add(len(list))
	}
	return out
}
