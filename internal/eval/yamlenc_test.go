package eval

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzYAMLEntries holds the YAML entries to what sigs.k8s.io/yaml wrote
// for the same results through JSON, for any strings, invalid UTF-8
// included (which rule messages can hold); where that failed (DEL, which
// the YAML reader refuses), the entries must still read back.
func FuzzYAMLEntries(f *testing.F) {
	for _, s := range []string{"", "plain", "yes", "- x", "a: b", "\xff\xfe", "é\u2028", "<&>", "multi\nline", "'q' \"d\"", "  lead", "trail  ", "0x1F", "~"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		results := []Result{
			{Resource: Resource{APIVersion: a, Kind: b, Namespace: a, Name: b}, Rule: a, Severity: b, EnforcementAction: a, Result: b, Container: a, Message: b, Exception: a},
			{Resource: Resource{Kind: a}, Rule: b, Result: "pass"},
		}
		got, err := yamlEntries(results)
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
