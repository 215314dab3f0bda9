package exprlang

import (
	"encoding/json"
	"k8s.io/apimachinery/pkg/labels"
	"testing"
)

// FuzzSelector feeds selectors in every form rules write them (a string, or
// a JSON map read as a label map or a LabelSelector): none may panic, and a
// selector that parses must match without panicking.
func FuzzSelector(f *testing.F) {
	for _, s := range []string{`app=web`, `tier in (a,b),!legacy`, `{"app":"web"}`, `{"matchLabels":{"a":"b"}}`,
		`{"matchExpressions":[{"key":"a","operator":"In","values":["b"]}]}`, `{"matchExpressions":[{"key":"a","operator":"Exists"}]}`, `{"x":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v any = s
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) == nil {
			v = m
		}
		sel, err := Selector(v)
		if err != nil {
			return
		}
		sel.Matches(labels.Set{})
		if _, err := selects(v, map[string]any{"app": "web"}); err != nil {
			t.Fatalf("selects(%q) failed after Selector accepted it: %v", s, err)
		}
	})
}
