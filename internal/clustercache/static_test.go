package clustercache

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func obj(apiVersion, kind, ns, name string, lbls map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(lbls)
	return u
}

const widgetCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"gizmos.example.com"},
"spec":{"group":"example.com","scope":"Cluster","names":{"kind":"Gizmo","plural":"gizmos"},"versions":[{"name":"v1"}]}}`

func TestStatic(t *testing.T) {
	var b StaticBuilder
	crd := decodeJSON(t, widgetCRD)
	for i, o := range []*unstructured.Unstructured{
		obj("apps/v1", "Deployment", "team-a", "web", map[string]string{"app": "web"}),
		obj("apps/v1", "Deployment", "", "defaulted", nil),
		obj("apps/v1beta1", "Deployment", "team-a", "old", nil),
		obj("policy/v1", "PodDisruptionBudget", "team-a", "web", nil),
		obj("v1", "Endpoints", "team-a", "web", nil),
		obj("v1", "Namespace", "", "team-a", nil),
		obj("example.com/v1", "Gizmo", "ignored", "g", nil),
		obj("other.io/v1", "Widget", "team-a", "w", nil),
		crd,
	} {
		if err := b.Add(o, "f.yaml:"+string(rune('1'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Add(obj("apps/v1", "Deployment", "team-a", "web", nil), "g.yaml:3"); err == nil || !strings.Contains(err.Error(), "first at f.yaml:1") {
		t.Errorf("duplicate: %v", err)
	}
	if err := b.Add(obj("v1", "ConfigMap", "x", "", nil), "g.yaml:9"); err == nil || !strings.Contains(err.Error(), "metadata.name") {
		t.Errorf("nameless: %v", err)
	}
	s := b.Build()
	for resource, want := range map[string]schema.GroupVersionResource{
		"deployments":                 {Group: "apps", Version: "v1", Resource: "deployments"},
		"deployments.apps":            {Group: "apps", Version: "v1", Resource: "deployments"},
		"deployments.v1.apps":         {Group: "apps", Version: "v1", Resource: "deployments"},
		"poddisruptionbudgets":        {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
		"endpoints":                   {Version: "v1", Resource: "endpoints"},
		"ingresses.networking.k8s.io": {Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
		"gizmos":                      {Group: "example.com", Version: "v1", Resource: "gizmos"},
		"widgets":                     {Group: "other.io", Version: "v1", Resource: "widgets"},
	} {
		res, err := s.Resolve(resource)
		if err != nil || res.GVR != want {
			t.Errorf("Resolve(%q) = %v, %v; want %v", resource, res.GVR, err, want)
		}
	}
	if res, _ := s.Resolve("namespaces"); res.Namespaced {
		t.Error("namespaces resolved as namespaced")
	}
	if res, _ := s.Resolve("gizmos"); res.Namespaced {
		t.Error("the CRD's Cluster scope was ignored")
	}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	if _, ok, _ := s.Get(deployments, "default", "defaulted"); !ok {
		t.Error("a namespaced object without a namespace is not in default")
	}
	if _, ok, _ := s.Get(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}, "", "g"); !ok {
		t.Error("a cluster-scoped object keeps the namespace it named")
	}
	got, err := s.List(deployments, "", labels.SelectorFromSet(labels.Set{"app": "web"}))
	if err != nil || len(got) != 1 || got[0].GetName() != "web" {
		t.Errorf("List by selector = %v, %v", got, err)
	}
	got, _ = s.List(deployments, "", nil)
	if names := []string{got[0].GetName(), got[1].GetName(), got[2].GetName()}; !slices.Equal(names, []string{"defaulted", "old", "web"}) {
		t.Errorf("List order = %v", names)
	}
	got[0].SetName("changed")
	if again, _ := s.List(deployments, "", nil); again[0].GetName() != "defaulted" {
		t.Error("a caller's change reached the reader")
	}
}

func TestFlatLabels(t *testing.T) {
	f, _ := flattenLabels(map[string]string{"b": "2", "a": "", "app.kubernetes.io/name": "x"})
	for k, want := range map[string]string{"a": "", "b": "2", "app.kubernetes.io/name": "x"} {
		if v, ok := f.Lookup(k); !ok || v != want {
			t.Errorf("Lookup(%q) = %q, %v", k, v, ok)
		}
	}
	if f.Has("c") || f.Has("2") || f.Get("app") != "" {
		t.Error("found a label that is not there")
	}
	if none, _ := flattenLabels(nil); len(f.Map()) != 3 || none != "" {
		t.Error("Map or empty set wrong")
	}
	sel, _ := labels.Parse("b=2,!c,a")
	if !sel.Matches(f) {
		t.Error("selector does not match")
	}
}

// FuzzStatic adds arbitrary JSON objects to a cluster state: whatever they
// hold, Add either takes them or says why, and the result resolves and lists
// without panicking.
func FuzzStatic(f *testing.F) {
	for _, seed := range []string{
		widgetCRD,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"n","labels":{"a":"b"}}}`,
		`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"x"},"spec":{"group":"g","names":{"kind":"K","plural":"ks"},"versions":"no"}}`,
		`{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"e"}}`,
		`{"apiVersion":"/","kind":"","metadata":{"name":7}}`,
	} {
		f.Add([]byte(seed), "deployments.apps")
	}
	f.Fuzz(func(t *testing.T, data []byte, resource string) {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil || m == nil {
			return
		}
		var b StaticBuilder
		_ = b.Add(&unstructured.Unstructured{Object: m}, "fuzz:1")
		s := b.Build()
		res, err := s.Resolve(resource)
		if err != nil {
			return
		}
		if _, err := s.List(res.GVR, "", labels.Everything()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStaticListAsAScan holds List, which finds a namespace's objects by
// binary search and matches flat labels, to a scan of every object with
// its labels as a map, over random objects in a few namespaces (some with
// NULs in their labels): each namespace (the first, the last, one with no
// objects, all of them), and selectors of every operator.
func TestStaticListAsAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 30))
	namespaces := []string{"a", "b", "b-x", "bb", "c", "z"}
	var b StaticBuilder
	var all []*unstructured.Unstructured
	for i := range 400 {
		lbls := map[string]string{}
		for _, k := range []string{"app", "tier", "x"} {
			if rng.IntN(3) > 0 {
				lbls[k] = fmt.Sprint(rng.IntN(4))
			}
		}
		// NULs, which flat labels would read as separators.
		switch rng.IntN(10) {
		case 0:
			lbls["aaa"] = "q\x00app\x001\x00tier\x002"
		case 1:
			lbls["app\x001"] = ""
		}
		o := obj("v1", "Pod", namespaces[rng.IntN(len(namespaces))], fmt.Sprintf("p%03d", rng.IntN(1000)), lbls)
		if b.Add(o, fmt.Sprint(i)) == nil {
			all = append(all, o)
		}
	}
	b.Add(obj("v1", "Service", "a", "s", nil), "svc")
	s := b.Build()
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for _, ns := range []string{"", "a", "b", "bb", "ba", "c", "z", "zz", "0"} {
		for _, q := range []string{"", "app=1", "app!=1", "app in (0,2),tier", "!x", "x notin (3), tier=0", "app=1,tier=2,x=3"} {
			sel, err := labels.Parse(q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.List(pods, ns, sel)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, o := range all {
				if (ns == "" || o.GetNamespace() == ns) && sel.Matches(labels.Set(o.GetLabels())) {
					want = append(want, o.GetNamespace()+"/"+o.GetName())
				}
			}
			// In namespace order, then name order ("b-x" after "b").
			slices.SortFunc(want, func(a, b string) int {
				an, aname, _ := strings.Cut(a, "/")
				bn, bname, _ := strings.Cut(b, "/")
				return cmp.Or(cmp.Compare(an, bn), cmp.Compare(aname, bname))
			})
			var names []string
			for _, o := range got {
				names = append(names, o.GetNamespace()+"/"+o.GetName())
			}
			if !slices.Equal(names, want) {
				t.Errorf("List(%q, %q) = %v, want %v", ns, q, names, want)
			}
		}
	}
	if got, _ := s.List(pods, "a", nil); len(got) == 0 {
		t.Error("a nil selector listed nothing")
	}
}

// Objects written differently that an API server would take as one (a
// namespaced object without a namespace and the same in the default one,
// a cluster-scoped object written with two namespaces) are reported, and
// the first is kept.
func TestStaticDuplicatesOnceDefaulted(t *testing.T) {
	b := StaticBuilder{DefaultNamespace: "team-a"}
	for i, o := range []*unstructured.Unstructured{
		obj("v1", "Pod", "", "web", map[string]string{"first": "yes"}),
		obj("v1", "Pod", "team-a", "web", nil),
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "x", "reader", map[string]string{"first": "yes"}),
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "y", "reader", nil),
		obj("v1", "Pod", "team-b", "web", nil),
	} {
		if err := b.Add(o, fmt.Sprintf("f.yaml:%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	s, errs := b.BuildChecked()
	want := []string{
		`f.yaml:2: Pod team-a/web is defined twice, first at f.yaml:1 (an object that names no namespace is in "team-a")`,
		`f.yaml:4: ClusterRole reader is defined twice, first at f.yaml:3 (the kind is cluster-scoped, so its namespace is ignored)`,
	}
	var got []string
	for _, err := range errs {
		got = append(got, err.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	pods, _ := s.List(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "", nil)
	roles, _ := s.List(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "", nil)
	if len(pods) != 2 || pods[0].GetLabels()["first"] != "yes" || len(roles) != 1 || roles[0].GetLabels()["first"] != "yes" {
		t.Errorf("kept %d pods and %d roles, want the first of each", len(pods), len(roles))
	}
}
