package manifest

import (
	"testing"
	"unsafe"
)

// Decoded keys and values that are known names share the table's strings
// instead of being allocated per object, on both fast paths; a string the
// table does not hold reads the same, newly allocated.
func TestDecodeSharesKnownNames(t *testing.T) {
	for name, doc := range map[string][]byte{"yaml": podDoc, "json": jsonOf(t, podDoc)} {
		t.Run(name, func(t *testing.T) {
			m, err := decode(doc, nil)
			if err != nil {
				t.Fatal(err)
			}
			shared := func(s string) bool {
				k, ok := interned().names[s].(string)
				return ok && unsafe.StringData(k) == unsafe.StringData(s)
			}
			for _, key := range []string{"apiVersion", "kind", "metadata", "spec"} {
				if _, ok := m[key]; !ok {
					t.Fatalf("no %s in %v", key, m)
				}
			}
			for key, v := range m {
				if !shared(key) {
					t.Errorf("key %q was allocated, not shared", key)
				}
				if s, ok := v.(string); ok && !shared(s) {
					t.Errorf("value %q of %s was allocated, not shared", s, key)
				}
			}
			meta := m["metadata"].(map[string]any)
			if name := meta["name"].(string); name != "pod-1" || shared(name) {
				t.Errorf("metadata.name %q: want pod-1, its own string", name)
			}
			sc := m["spec"].(map[string]any)["securityContext"].(map[string]any)
			if typ := sc["seccompProfile"].(map[string]any)["type"].(string); !shared(typ) {
				t.Errorf("seccompProfile.type %q was allocated, not shared", typ)
			}
		})
	}
}
