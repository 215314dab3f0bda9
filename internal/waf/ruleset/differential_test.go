package ruleset

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// FuzzSecLangDifferential reads SecLang with the sandbox's reader (split,
// check) and with Coraza's own parser, and fails where the two disagree on
// anything the sandbox decides on. Coraza's parser is internal to Coraza, so
// the test watches it work: the compile's guard records every logical line
// Coraza evaluates (its "Parsing directive" debug event), and the engine's
// replacements report every forbidden action, operator, audit log writer or
// directive Coraza reached.
//
//   - Directives: the lines Coraza evaluates are exactly the sandbox's
//     directive texts, in order (so directive names and argument strings,
//     which both derive from the text in the same way, agree), up to the
//     first Include (Coraza then reads the included file) and up to the
//     first problem of the reader itself (an overlong line, a source ending
//     open), which the check rejects.
//   - Capabilities: when Coraza reaches a forbidden capability in a bundle
//     the reader accepts, the check reports a sandbox violation.
//
// The rules are split into two RuleSources at cut, so a source that ends
// open is exercised against the next one.
func FuzzSecLangDifferential(f *testing.F) {
	for _, s := range []string{
		"SecRuleEngine On\nSecRule ARGS \"@rx x\" \"id:1,deny\"",
		"SecRule ARGS \"@rx x\" \"id:1,pass\"\nSecRuleUpdateActionById 1\t\"setenv:A=b\"",
		"SecRule ARGS \"@rx x\" \"id:1,pass\"\nSecRuleUpdateActionById 1 2 \"setenv:A=b\"",
		"SecRule ARGS \"@rx x\" \"id:1,pass\"\nSecRuleUpdateActionById 1-3 \"exec:/bin/sh\"",
		"SecAuditLog  /dev/stdout\r\nSecAuditEngine On",
		"SecRule ARGS \"@rx x\" \\\r\n \"id:1,pass,\\\r\n setenv:A=b\"",
		"SecAction \\",
		"SecRuleEngine On\nSecDebugLog /tmp/x",
		"SecDataset d `\nevil\n`\nSecRule ARGS \"@pmFromDataset d\" \"id:1,deny\"",
		"SecDefaultAction \"phase:2,log,pass,setenv:A=b\"\nSecRule ARGS \"@rx x\" \"id:2\"",
		"SecDefaultAction 'phase:2,log,pass,setenv:A=b'\nSecRule ARGS \"@rx x\" \"id:2\"",
		"SecRule FILES_TMPNAMES \"@inspectFile /bin/sh\" \"id:1,deny\"",
		"SecAuditLogType Concurrent\nSecAuditLog audit.log",
		"SecUploadKeepFiles  On\nSecUploadDir\t/tmp",
		"SecAction \"id:1,pass,'setenv:A=b'\"\nsecaction id:2,pass,setenv:a=b",
		"SecRule ARGS \"@rx \\\" \" \"id:1,pass,setenv:A=b\"",
		strings.Repeat("x", MaxLineLength) + "\r\nSecAuditLog /tmp/a",
		"\v SecAction \"id:1,pass,exec:/bin/sh\"\u0085",
	} {
		f.Add(s, uint(len(s)))   // one source
		f.Add(s, uint(len(s)/2)) // cut in two
	}
	f.Fuzz(func(t *testing.T, rules string, cut uint) {
		i := int(cut % uint(len(rules)+1))
		b := Join([]Source{{Name: "a", Rules: rules[:i]}, {Name: "b", Rules: rules[i:]}})
		problems, _ := check(b, Options{})
		dirs, lexProblems := splitBundle(b)

		var seen []string
		g := &guard{record: func(l string) { seen = append(seen, l) }}
		_, err := newWAF(context.Background(), b, "rs-x", b.Rules, Options{}, g, nil, nil)

		// Directives: compare up to the first Include and the first line
		// the reader rejects.
		limit := len(dirs)
		for _, p := range lexProblems {
			for k, d := range dirs {
				if d.End >= p.Line && k < limit {
					limit = k
				}
			}
		}
		for k, d := range dirs[:limit] {
			if k >= len(seen) {
				if err == nil {
					t.Fatalf("Coraza evaluated %d directives, the sandbox read %d; first missing: %q", len(seen), limit, d.Text)
				}
				break
			}
			if seen[k] != d.Text {
				t.Fatalf("directive %d: Coraza evaluated %q, the sandbox read %q", k, seen[k], d.Text)
			}
			if d.Name == "include" {
				break
			}
		}

		// Capabilities: what the engine refused, the check rejects as a
		// sandbox violation. (A bundle the reader rejects is never compiled,
		// and Coraza reads it differently by design.)
		var fd *forbiddenDirective
		if len(lexProblems) == 0 && err != nil && (errors.As(err, &fd) || strings.Contains(err.Error(), refusal)) && !hasKind(problems, KindSandbox) {
			t.Fatalf("Coraza reached a forbidden capability the check let through: %v (check: %v)", err, problems)
		}
	})
}

func hasKind(problems []Problem, k Kind) bool {
	for _, p := range problems {
		if p.Kind == k {
			return true
		}
	}
	return false
}
