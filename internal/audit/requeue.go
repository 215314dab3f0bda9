package audit

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/clustercache"
)

// Requeue queues the object of kind gk named namespace/name for evaluation
// again, when an informer of the audit watches it, and reports whether one
// does. It is the hook of the lookup layer: an object whose rules read
// another object is evaluated again when that one changes, on its watch
// event rather than at the next resync.
func (s *Source) Requeue(gk schema.GroupKind, namespace, name string) bool {
	for _, w := range s.watches.list() {
		if w.gvk.GroupKind() == gk && (w.namespace == "" || w.namespace == namespace) && !w.stopped.Load() {
			s.enqueueKey(w, clustercache.Key{Namespace: namespace, Name: name}, s.clock.Now())
			return true
		}
	}
	return false
}

// RequeueKinds queues every watched object of the given kinds in namespace
// ("" for every namespace): what an exception that appeared, changed,
// expired or went away concerns. The objects keep their findings until they
// are evaluated again.
func (s *Source) RequeueKinds(namespace string, gks []schema.GroupKind) {
	now := s.clock.Now()
	for _, w := range s.watches.list() {
		if !slices.Contains(gks, w.gvk.GroupKind()) || w.stopped.Load() {
			continue
		}
		for _, k := range w.keys() {
			if namespace == "" || k.Namespace == namespace {
				s.enqueueKey(w, k, now)
			}
		}
	}
}
