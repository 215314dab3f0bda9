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
