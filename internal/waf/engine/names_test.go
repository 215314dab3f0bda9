package engine

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzChildName: whatever name the API server accepts for an Engine (a DNS
// subdomain), the names of its objects are DNS labels (what a Service
// needs), and two Engine names never give one child name.
func FuzzChildName(f *testing.F) {
	for _, s := range []string{"a", "edge-waf", "edge.waf", "edge-waf.", "a.b", "a-b", string(make([]byte, 253))} {
		f.Add(s, "a-b")
	}
	// A plain name shaped like a.b's hashed child name.
	f.Add("a.b", "a-b-2e7336dc8e")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(validation.IsDNS1123Subdomain(a)) > 0 || len(validation.IsDNS1123Subdomain(b)) > 0 {
			return
		}
		if errs := validation.IsDNS1035Label(ChildName(a)); len(errs) > 0 {
			t.Fatalf("ChildName(%q) = %q: %v", a, ChildName(a), errs)
		}
		if errs := validation.IsDNS1123Subdomain(CAConfigMapName(a)); len(errs) > 0 {
			t.Fatalf("CAConfigMapName(%q): %v", a, errs)
		}
		if a != b && ChildName(a) == ChildName(b) {
			t.Fatalf("Engines %q and %q share the child name %q", a, b, ChildName(a))
		}
		if errs := validation.IsDNS1035Label(NetworkPolicyName("ns", a)); len(errs) > 0 {
			t.Fatalf("NetworkPolicyName: %v", errs)
		}
	})
}
