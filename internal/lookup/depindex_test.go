package lookup_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/lookup"
)

func dep(i int) lookup.Dependent {
	return lookup.Dependent{Rule: lookup.RuleKey{Kind: "PortalClusterRule", Name: "r"}, Object: lookup.ObjectKey{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "a", Name: fmt.Sprint("d", i)}}
}

// The index never holds more than its bound: the least recently recorded
// entries go first.
func TestDepIndexIsBounded(t *testing.T) {
	idx := lookup.NewDepIndex(10)
	svc := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	for i := range 25 {
		idx.Add(dep(i), lookup.Read{GVR: svc, Namespace: "a", Name: fmt.Sprint("s", i)})
	}
	if idx.Len() != 10 || idx.Evicted() != 15 {
		t.Fatalf("Len %d, Evicted %d, want 10 and 15", idx.Len(), idx.Evicted())
	}
	if got := idx.Affected(svc, "a", "s0"); len(got) != 0 {
		t.Errorf("evicted entry still answers: %v", got)
	}
	if got := idx.Affected(svc, "a", "s24"); len(got) != 1 || got[0] != dep(24) {
		t.Errorf("newest entry: %v", got)
	}
}

func TestDepIndexSelectorsAndForget(t *testing.T) {
	idx := lookup.NewDepIndex(0)
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	sel, _ := labels.Parse("app=web")
	idx.Add(dep(1), lookup.Read{GVR: pods, Namespace: "a", Selector: sel})
	idx.Add(dep(1), lookup.Read{GVR: pods, Namespace: "a", Selector: sel})
	idx.Add(dep(2), lookup.Read{GVR: pods, Selector: labels.Everything()})
	if idx.Len() != 2 {
		t.Fatalf("Len %d, want 2 (a repeated read is one entry)", idx.Len())
	}
	if got := idx.Affected(pods, "a", "p", labels.Set{"app": "db"}); len(got) != 1 || got[0] != dep(2) {
		t.Errorf("app=db pod: %v, want only the all-namespace list", got)
	}
	if got := idx.Affected(pods, "a", "p", labels.Set{"app": "db"}, labels.Set{"app": "web"}); len(got) != 2 {
		t.Errorf("pod relabelled from app=web: %v, want both (its old labels matched)", got)
	}
	if got := idx.Affected(pods, "b", "p", labels.Set{"app": "web"}); len(got) != 1 || got[0] != dep(2) {
		t.Errorf("pod of namespace b: %v", got)
	}
	idx.Forget(dep(2))
	if got := idx.Affected(pods, "b", "p", labels.Set{"app": "web"}); len(got) != 0 || idx.Len() != 1 {
		t.Errorf("after Forget: %v, Len %d", got, idx.Len())
	}
}

// TestDepIndexIsFairAcrossNamespaces: a namespace whose rule reads thousands
// of objects fills the index, and once it is full it evicts its own entries,
// not the few another namespace's rule recorded (with one LRU for everyone,
// those went first and that namespace's findings waited for the resync).
func TestDepIndexIsFairAcrossNamespaces(t *testing.T) {
	idx := lookup.NewDepIndex(100)
	svc := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	tenantDep := func(ns string, i int) lookup.Dependent {
		return lookup.Dependent{Rule: lookup.RuleKey{Kind: "PortalRule", Namespace: ns, Name: "r"},
			Object: lookup.ObjectKey{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: ns, Name: fmt.Sprint("p", i)}}
	}
	for i := range 10 {
		idx.Add(tenantDep("quiet", i), lookup.Read{GVR: svc, Namespace: "quiet", Name: fmt.Sprint("s", i)})
	}
	for i := range 5000 {
		idx.Add(tenantDep("busy", i), lookup.Read{GVR: svc, Namespace: "busy", Name: fmt.Sprint("s", i)})
	}
	if idx.Len() != 100 {
		t.Fatalf("Len %d, want the bound of 100", idx.Len())
	}
	for i := range 10 {
		if got := idx.Affected(svc, "quiet", fmt.Sprint("s", i)); len(got) != 1 {
			t.Fatalf("the quiet namespace's read s%d was evicted by the busy one's", i)
		}
	}
	if got := idx.Affected(svc, "busy", "s4999"); len(got) != 1 {
		t.Errorf("the busy namespace's newest read is gone")
	}
	// Entries removed as evaluations are forgotten leave the counts right:
	// the busy namespace can grow again to what the quiet one leaves.
	for i := range 10 {
		idx.Forget(tenantDep("quiet", i))
	}
	for i := range 200 {
		idx.Add(tenantDep("busy", 10000+i), lookup.Read{GVR: svc, Namespace: "busy", Name: fmt.Sprint("t", i)})
	}
	if idx.Len() != 100 {
		t.Errorf("Len %d after the quiet namespace left, want 100", idx.Len())
	}
}
