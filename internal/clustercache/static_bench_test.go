package clustercache

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// BenchmarkStaticList is a rule's cluster.pods.list(namespace, selector)
// in `portal eval --cluster-state`: 20,000 pods in the namespace listed and
// 20,000 in nine others, ten pods selected.
func BenchmarkStaticList(b *testing.B) {
	var sb StaticBuilder
	for i := range 40_000 {
		ns := "shop"
		if i%2 == 1 {
			ns = fmt.Sprint("team-", i%9)
		}
		if err := sb.Add(obj("v1", "Pod", ns, fmt.Sprint("p", i), map[string]string{"app": fmt.Sprint("a", i/2%2000), "tier": "web"}), ""); err != nil {
			b.Fatal(err)
		}
	}
	s := sb.Build()
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	sel := labels.SelectorFromSet(labels.Set{"app": "a7", "tier": "web"})
	for b.Loop() {
		got, err := s.List(pods, "shop", sel)
		if err != nil || len(got) != 10 {
			b.Fatalf("%d pods, %v", len(got), err)
		}
	}
}
