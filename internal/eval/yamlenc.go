package eval

import (
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// The YAML report is what sigs.k8s.io/yaml.Marshal wrote for the whole
// report: encoding/json, then the JSON read back by go.yaml.in/yaml/v2 and
// written by it. The round trip through JSON was most of -o yaml's time;
// the entries are now given to the YAML encoder as the maps the round trip
// made, strings made valid UTF-8 as encoding/json makes them, so the bytes
// are the same (TestEncodedFormatsMatchWhole).

// yamlEntries encodes results as entries of the report's results
// sequence.
func yamlEntries(results []Result) ([]byte, error) {
	items := make([]any, len(results))
	for i := range results {
		items[i] = yamlResult(&results[i])
	}
	out, err := yamlv2.Marshal(items)
	if err != nil {
		// The encoder refuses some strings it writes escaped once read back
		// from JSON (control characters): that way, for this batch.
		return yaml.Marshal(results)
	}
	return out, nil
}

func yamlResult(r *Result) map[string]any {
	m := map[string]any{
		"resource": map[string]any{
			"apiVersion": jsonText(r.Resource.APIVersion),
			"kind":       jsonText(r.Resource.Kind),
			"namespace":  jsonText(r.Resource.Namespace),
			"name":       jsonText(r.Resource.Name),
		},
		"rule":              jsonText(r.Rule),
		"severity":          jsonText(r.Severity),
		"enforcementAction": jsonText(r.EnforcementAction),
		"result":            jsonText(r.Result),
	}
	for k, v := range map[string]string{"category": r.Category, "container": r.Container, "message": r.Message, "exception": r.Exception} {
		if v != "" {
			m[k] = jsonText(v)
		}
	}
	return m
}

// jsonText is s as encoding/json reads it back: each byte of invalid UTF-8
// replaced by U+FFFD.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}
