package network

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
)

// The resources the analysis reads.
var (
	PodsResource            = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	NamespacesResource      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	NetworkPoliciesResource = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
)

// Analyse runs the enabled checks on every namespace of r at once: what
// `portal eval --network` does with manifests (a clustercache.Static). It
// returns the objects with findings, sorted by kind, namespace and name. A
// namespace that pods or policies name but no Namespace object defines is
// taken to exist, as applying the manifests would require.
func Analyse(r clustercache.Reader, cfg Config) ([]core.ObjectFindings, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &staticWorld{namespaces: map[string]labels.Set{}, pods: map[string][]labels.Set{}}
	for _, ns := range builtinNamespaces {
		w.addNamespace(ns, nil)
	}
	nss, err := r.List(NamespacesResource, "", nil)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	for _, n := range nss {
		w.addNamespace(n.GetName(), n.GetLabels())
	}
	pods, err := r.List(PodsResource, "", nil)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	for _, p := range pods {
		w.addNamespace(p.GetNamespace(), nil)
		w.pods[p.GetNamespace()] = append(w.pods[p.GetNamespace()], labels.Set(p.GetLabels()))
	}
	nps, err := r.List(NetworkPoliciesResource, "", nil)
	if err != nil {
		return nil, fmt.Errorf("list NetworkPolicies: %w", err)
	}
	byNS := map[string][]*Policy{}
	for _, u := range nps {
		p, err := parsePolicy(u)
		if err != nil {
			return nil, err
		}
		w.addNamespace(p.namespace, nil)
		byNS[p.namespace] = append(byNS[p.namespace], p)
	}
	// One time for every finding of the run: manifests have no history.
	now := clock.RealClock{}.Now()
	var out []core.ObjectFindings
	for _, ns := range slices.Sorted(maps.Keys(w.namespaces)) {
		pols := byNS[ns]
		sortPolicies(pols)
		for _, of := range analyseNamespace(&cfg, w, ns, pols, now).objects {
			if len(of.Findings) > 0 {
				out = append(out, of)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b core.ObjectFindings) int {
		return cmp.Or(cmp.Compare(a.Object.Kind, b.Object.Kind), cmp.Compare(a.Object.Namespace, b.Object.Namespace), cmp.Compare(a.Object.Name, b.Object.Name))
	})
	return out, nil
}

// builtinNamespaces exist in every cluster, so peers may select them
// whether the manifests define them or not.
var builtinNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// staticWorld is a world over manifests.
type staticWorld struct {
	namespaces map[string]labels.Set
	pods       map[string][]labels.Set
}

// addNamespace records a namespace, with the name label the API server sets
// on every namespace, so selectors read it as they would in a cluster.
func (w *staticWorld) addNamespace(name string, l map[string]string) {
	if _, ok := w.namespaces[name]; ok && l == nil {
		return
	}
	set := labels.Set{}
	maps.Copy(set, l)
	set[namespaceNameKey] = name
	w.namespaces[name] = set
}

func (w *staticWorld) namespaceLabels(name string) (labels.Labels, bool) {
	l, ok := w.namespaces[name]
	return l, ok
}

func (w *staticWorld) eachNamespace(fn func(string, labels.Labels) bool) {
	for _, name := range slices.Sorted(maps.Keys(w.namespaces)) {
		if !fn(name, w.namespaces[name]) {
			return
		}
	}
}

func (w *staticWorld) eachPod(ns string, fn func(labels.Labels) bool) {
	for _, l := range w.pods[ns] {
		if !fn(l) {
			return
		}
	}
}
