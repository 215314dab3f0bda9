package pod

import (
	"maps"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/core"
)

// TestSchemaMatchesBuild: the schema the compiler checks field names against
// describes exactly the maps Build produces, so a field added to the sugar
// without the schema (or the other way round) fails here, not in a user's
// rule.
func TestSchemaMatchesBuild(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "n", "labels": map[string]any{"a": "b"}},
		"spec": map[string]any{
			"hostNetwork":     true,
			"securityContext": map[string]any{"runAsUser": int64(1), "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"containers": []any{map[string]any{
				"name": "c", "image": "nginx:1",
				"securityContext": map[string]any{"privileged": true, "capabilities": map[string]any{"add": []any{"NET_ADMIN"}}},
			}},
		},
	}}
	ec, err := Builder{}.Build(obj, &core.Request{Operation: "CREATE"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	schema := Schema()
	env := maps.Clone(ec.Env)
	env["container"] = ec.Containers[0].Sugar
	if got, want := slices.Sorted(maps.Keys(env)), slices.Sorted(maps.Keys(schema)); !slices.Equal(got, want) {
		t.Fatalf("names bound %v, schema has %v", got, want)
	}
	for name, s := range schema {
		check(t, name, env[name], s)
	}
}

func check(t *testing.T, path string, v any, s *core.Schema) {
	t.Helper()
	switch {
	case s.Open:
	case s.Fields != nil:
		m, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: schema has fields, value is %T", path, v)
			return
		}
		if got, want := slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(s.Fields)); !slices.Equal(got, want) {
			t.Errorf("%s: fields %v, schema has %v", path, got, want)
		}
		for k, fs := range s.Fields {
			check(t, path+"."+k, m[k], fs)
		}
	default:
		if _, isMap := v.(map[string]any); isMap {
			t.Errorf("%s: schema says leaf, value is a map", path)
		}
		if got := leafType(v); v != nil && got != s.Type {
			t.Errorf("%s: schema says %q, value is %T (%s)", path, s.Type, v, got)
		}
	}
}

// leafType names a value's type as the schema does; unset fields are nil,
// which any leaf type allows.
func leafType(v any) string {
	switch v.(type) {
	case string:
		return str
	case bool:
		return boolean
	case int, int64, float64:
		return number
	case []any, []string:
		return list
	}
	return "unknown"
}
