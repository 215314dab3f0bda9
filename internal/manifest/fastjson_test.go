package manifest

import (
	"encoding/json"
	"reflect"
	"testing"

	kjson "k8s.io/apimachinery/pkg/util/json"
)

// jsonSeeds are objects on both sides of the fast path's limits.
var jsonSeeds = []string{
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {}}, "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}}`,
	`{"i": 1, "n": -2, "z": 0, "nz": -0, "f": 1.5, "e": 1e3, "E": -2.5E-3, "big": 99999999999999999999, "max": 9223372036854775807, "over": 9223372036854775808, "inf": 1e400}`,
	`{"t": true, "f": false, "n": null, "s": "", "a": [], "o": {}, "nested": [[1, [2]], {"x": {"y": [null]}}]}`,
	`{"esc": "q\" b\\ s\/ \b\f\n\r\t", "u": "\u00e9\u4e2d\ud83d\ude00", "lone": "\ud83d", "bad": "\x", "raw": "é中"}`,
	`{"dup": 1, "dup": 2}`,
	` { "a" : 1 , "b" : [ 1 , 2 ] } `,
	`{"a": 01}`, `{"a": 1.}`, `{"a": .5}`, `{"a": +1}`, `{"a": 1e}`, `{"a": -}`, `{"a": tru}`, `{"a": nul}`,
	`{"a": 1,}`, `{"a": [1,]}`, `{"a" 1}`, `{a: 1}`, `{"a": 1} x`, `{"a": 1}{"b": 2}`, `[1]`, `null`, `{"a": "x`, "{\"a\": \"\t\"}",
	"{\"a\": \"\xff\"}",
}

// FuzzFastJSON holds the fast path to the decoder it stands in for:
// whatever it accepts, k8s.io/apimachinery/pkg/util/json accepts and
// reads the same.
func FuzzFastJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		got, ok := fastJSON([]byte(doc), nil)
		if !ok {
			return
		}
		var want map[string]any
		if err := kjson.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatalf("fast path read %q as %v, the decoder rejects it: %v", doc, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path read %q as\n%#v\nthe decoder as\n%#v", doc, got, want)
		}
		decodesThroughAPool(t, fastJSON, doc, want)
	})
}

// TestFastJSONCoversGeneratedJSON: the fast path, not the decoder, reads
// what kubectl and encoding/json write, escapes included. Without it the
// fast path could refuse everything and no other test would notice.
func TestFastJSONCoversGeneratedJSON(t *testing.T) {
	m, err := decodeYAML(podDoc)
	if err != nil {
		t.Fatal(err)
	}
	m["metadata"].(map[string]any)["annotations"] = map[string]any{
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}} <é>` + "\n",
	}
	for _, marshal := range []func(any) ([]byte, error){json.Marshal, func(v any) ([]byte, error) { return json.MarshalIndent(v, "", "    ") }} {
		doc, err := marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := fastJSON(doc, nil)
		if !ok {
			t.Fatalf("the fast path refused %s", doc)
		}
		var want map[string]any
		if err := kjson.Unmarshal(doc, &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path and decoder disagree (%v)", err)
		}
	}
}
