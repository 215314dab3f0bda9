package eval

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzYAMLEntries holds the YAML entries to what sigs.k8s.io/yaml wrote
// for the same results through JSON, for any strings, invalid UTF-8
// included (which rule messages can hold); where that failed (DEL, which
// the YAML reader refuses), the entries must still read back. The seeds
// include what appendYAMLEntry writes itself (ASCII from a letter: plain,
// quoted, and long enough to go on on another line) and what it leaves to
// the encoder.
func FuzzYAMLEntries(f *testing.F) {
	long := "PSS restricted (runAsNonRoot != true): container \"c0\" must run as non-root: the pod's securityContext.runAsNonRoot=true  or  #not"
	for _, s := range []string{"", "plain", "yes", "On", "NULL", "y", "- x", "a: b", "a:b", "a:", "a #b", "a#b", "a ", "it's", "a,[b]{c}?&*!|>%@`", "\xff\xfe", "é\u2028", "<&>", "multi\nline", "'q' \"d\"", "  lead", "trail  ", "0x1F", "~", "1.5", "-1", long, long[:70], strings.Repeat("word ", 40), strings.Repeat("x", 90) + " y z"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		results := []Result{
			{Resource: Resource{APIVersion: a, Kind: b, Namespace: a, Name: b}, Rule: a, Severity: b, EnforcementAction: a, Result: b, Container: a, Message: b, Exception: a},
			{Resource: Resource{Kind: a}, Rule: b, Result: "pass"},
		}
		got, err := yamlEntries(nil, results)
		want, wantErr := yaml.Marshal(results)
		if err != nil {
			t.Fatalf("%q, %q: %v", a, b, err)
		}
		if wantErr != nil {
			// DEL: sigs.k8s.io/yaml cannot read back the JSON it wrote, so
			// the whole report failed; the entries, escaped, must parse.
			var back []map[string]any
			if err := yaml.Unmarshal(got, &back); err != nil || len(back) != len(results) {
				t.Fatalf("%q, %q: entries do not read back (%v):\n%s", a, b, err, got)
			}
			return
		}
		if string(got) != string(want) {
			t.Fatalf("%q, %q:\n got %s\nwant %s", a, b, got, want)
		}
	})
}
