package ruleset

import (
	"strings"
	"testing"
)

// FuzzCheck feeds arbitrary SecLang to the sandbox pre-check: it must never
// panic, every problem must point at a line of the input, and a bundle it
// passes must not name a host path in an Include.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		crsRules,
		`SecRule ARGS "@pmFromFile words.txt" "id:1,deny,setenv:'a=b'"`,
		"SecRule ARGS \"@rx x\" \\\n \"id:1,\\\n chain\"\nSecRule ARGS \"!@inspectFile /bin/sh\" \"t:none\"",
		"SecDataset x `\na\n`\nSecAuditLog /dev/stdout",
		"Include /etc/hostname\nSecDebugLog x\nSecRuleRemoveById 1 2-9 \"10\"",
		`SecAction "id:1,exec:/bin/sh,'"`,
		`SecRule "@" "`, "\\", "`", `SecRule A "\"" "\\\\"`,
	} {
		f.Add(s, "words.txt")
	}
	f.Fuzz(func(t *testing.T, rules, file string) {
		b := Join([]Source{{Name: "a", Rules: rules}, {Name: "b", Rules: rules}}, map[string][]byte{file: []byte("x")})
		lines := strings.Count(b.Rules, "\n")
		problems, _ := check(b, Options{})
		for _, p := range problems {
			if p.Line < 0 || p.Line > lines {
				t.Fatalf("problem at line %d of %d: %v", p.Line, lines, p)
			}
			if p.Line > 0 && p.Source == "" {
				t.Fatalf("problem at line %d not mapped to a source: %v", p.Line, p)
			}
		}
		if len(problems) > 0 {
			return
		}
		dirs, _ := splitBundle(b)
		for _, d := range dirs {
			if d.Name == "include" && !strings.HasPrefix(strings.TrimSpace(d.Opts), "@") {
				t.Fatalf("include %q passed the check", d.Opts)
			}
		}
	})
}
