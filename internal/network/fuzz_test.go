package network

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// FuzzParsePolicy feeds arbitrary NetworkPolicy JSON (a tenant writes it,
// or a manifest in CI) through the parser and every check: no input may
// panic, and a policy that parses is analysed to the end.
func FuzzParsePolicy(f *testing.F) {
	for _, seed := range []string{
		`{"spec":{"podSelector":{},"policyTypes":["Ingress"]}}`,
		`{"spec":{"podSelector":{"matchLabels":{"app":"web"}},"egress":[{"to":[{"ipBlock":{"cidr":"0.0.0.0/0"}}],"ports":[{"port":53}]}]}}`,
		`{"spec":{"podSelector":{"matchExpressions":[{"key":"a","operator":"In","values":["x","y"]}]},"ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"t":"g"}},"podSelector":{}}],"ports":[{"protocol":"UDP","port":"dns","endPort":60}]}]}}`,
		`{"spec":{"podSelector":{"matchExpressions":[{"key":"a","operator":"Bogus"}]}}}`,
		`{"spec":{"ingress":[{"from":[{"ipBlock":{"cidr":"::ffff:0.0.0.0/96"}}]}]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetNamespace("ns")
		u.SetName("p")
		p, err := parsePolicy(u)
		if err != nil {
			return
		}
		cfg := DefaultConfig()
		cfg.MaxPodVisits = 1000
		w := &staticWorld{namespaces: map[string]labels.Set{}, pods: map[string][]labels.Set{}}
		w.addNamespace("ns", map[string]string{"t": "g"})
		w.pods["ns"] = []labels.Set{{"app": "web"}, {"a": "x"}}
		res := analyseNamespace(&cfg, w, "ns", []*Policy{p}, time.Time{})
		if len(res.objects) != 2 {
			t.Fatalf("analysis listed %d objects, want the namespace and the policy", len(res.objects))
		}
	})
}
