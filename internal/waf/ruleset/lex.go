package ruleset

import (
	"bufio"
	"fmt"
	"strings"
)

// MaxLineLength is the longest physical line accepted, in bytes, counting
// a carriage return before the newline. Coraza reads rules with a
// bufio.Scanner of the default size, which stops at a longer line without an
// error, so every directive after it would be dropped silently.
const MaxLineLength = bufio.MaxScanTokenSize - 1

// directive is one logical SecLang directive as Coraza's parser sees it:
// comment lines skipped, continuation lines joined, backtick blocks kept.
type directive struct {
	// Line and End are the bundle lines (1-based) it starts and ends on.
	Line, End int
	// Text is the logical line Coraza evaluates (seclang Parser.evaluateLine).
	Text string
	// Name is the directive name, lower-cased ("secrule"); Word is the name
	// as written ("SecRule").
	Name, Word string
	// Opts is everything after the name, with surrounding double quotes
	// removed the way Coraza removes them: exactly the argument string
	// Coraza hands to the directive.
	Opts string
}

// splitBundle cuts a bundle into directives. Each source (span) is read on
// its own, so a continuation or an open backtick block at the end of one
// source is reported instead of swallowing the next source's first line.
func splitBundle(b Bundle) ([]directive, []Problem) {
	if len(b.Spans) == 0 {
		return split(b.Rules, 1)
	}
	var (
		out      []directive
		problems []Problem
	)
	rest := b.Rules
	for _, s := range b.Spans {
		end := 0
		for n := 0; n < s.Lines && end < len(rest); n++ {
			i := strings.IndexByte(rest[end:], '\n')
			if i < 0 {
				end = len(rest)
				break
			}
			end += i + 1
		}
		d, p := split(rest[:end], s.First)
		out, problems = append(out, d...), append(problems, p...)
		rest = rest[end:]
	}
	if rest != "" {
		d, p := split(rest, strings.Count(b.Rules[:len(b.Rules)-len(rest)], "\n")+1)
		out, problems = append(out, d...), append(problems, p...)
	}
	return out, problems
}

// split cuts rules into directives with the algorithm of Coraza's parser
// (seclang Parser.parseString and evaluateLine, v3.8.1): the same
// bufio.Scanner, strings.TrimSpace, comment, backtick and continuation
// rules. first is the bundle line of rules' first line. It reports what that
// parser would silently drop or refuse.
func split(rules string, first int) ([]directive, []Problem) {
	var (
		out      []directive
		problems []Problem
		buf      strings.Builder
		start    int
		inTicks  bool
	)
	sc := bufio.NewScanner(strings.NewReader(rules))
	n := first - 1
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
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
		if d, ok := newDirective(buf.String(), start, n); ok {
			out = append(out, d)
		} else {
			problems = append(problems, Problem{Kind: KindInvalid, Line: start, Message: "Coraza refuses this line as an empty directive"})
		}
		buf.Reset()
		start = 0
	}
	if sc.Err() != nil {
		problems = append(problems, Problem{Kind: KindInvalid, Line: n + 1,
			Message: fmt.Sprintf("line is longer than %d bytes (with its carriage return); Coraza's parser would silently drop every rule from here on", MaxLineLength)})
		return out, problems
	}
	switch {
	case inTicks:
		problems = append(problems, Problem{Kind: KindInvalid, Line: start, Message: "backtick block is never closed in this RuleSource"})
	case start != 0:
		problems = append(problems, Problem{Kind: KindInvalid, Line: start,
			Message: "the last directive of this RuleSource ends with a line continuation (\\); Coraza would join it to whatever follows or silently ignore it"})
	}
	return out, problems
}

// newDirective reads a logical line as seclang evaluateLine does; ok is
// false for the lines it refuses as invalid.
func newDirective(text string, line, end int) (directive, bool) {
	if text == "" || text[0] == '#' {
		return directive{}, false
	}
	name, opts, _ := strings.Cut(text, " ")
	if len(opts) >= 3 && opts[0] == '"' && opts[len(opts)-1] == '"' {
		opts = strings.Trim(opts, `"`)
	}
	return directive{Line: line, End: end, Text: text, Name: strings.ToLower(name), Word: name, Opts: opts}, true
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
