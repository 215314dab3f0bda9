package rule

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/vilaca/portal/internal/engine"
)

// Loader feeds the rules of one source (a folder, the rule custom resources)
// into an Index until ctx ends. Start matches controller-runtime's
// manager.Runnable, so a loader can be added to the manager as it is.
type Loader interface {
	Start(ctx context.Context) error
}

// Target receives the merged rule set whenever it changes; *engine.Engine is
// one.
type Target interface {
	SetRules([]*engine.Rule)
}

// Index merges the rules of every source into one set for the engine. Each
// source owns the keys it sets (a file path, a custom resource), so a change
// replaces exactly the rules that came from it.
type Index struct {
	mu      sync.Mutex
	sources map[string][]*engine.Rule
	target  Target
	// changed are told after the target holds a new rule set: the layers
	// that keep something in step with the rules (the webhook
	// configuration, audit's watches) subscribe here.
	changed []func()
}

// OnChange calls fn each time the rule set changes, after the target holds
// the new set, in the order the subscriptions were made. Subscribe before the
// sources start loading: a change published earlier is not replayed.
func (i *Index) OnChange(fn func()) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.changed = append(i.changed, fn)
}

// NewIndex returns an empty index that publishes to target.
func NewIndex(target Target) *Index {
	return &Index{sources: map[string][]*engine.Rule{}, target: target}
}

// Set replaces the rules of key. An empty rules slice keeps the key known but
// contributes nothing (a file whose every rule failed).
func (i *Index) Set(key string, rules []*engine.Rule) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.sources[key] = rules
	i.publish()
}

// Delete forgets key and its rules.
func (i *Index) Delete(key string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if _, ok := i.sources[key]; !ok {
		return
	}
	delete(i.sources, key)
	i.publish()
}

// DeleteFunc forgets every key for which drop returns true.
func (i *Index) DeleteFunc(drop func(key string) bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := len(i.sources)
	maps.DeleteFunc(i.sources, func(k string, _ []*engine.Rule) bool { return drop(k) })
	if len(i.sources) != n {
		i.publish()
	}
}

// Republish tells the subscribers again though the rules did not change:
// what they apply to did (a CRD deleted), and the layers that keep
// something in step with the rules (audit's watches, the webhook's kinds)
// resolve their kinds again.
func (i *Index) Republish() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.publish()
}

// Keys lists the known keys in order.
func (i *Index) Keys() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Sorted(maps.Keys(i.sources))
}

// publish hands the merged set to the target, ordered by key so evaluation
// order (and so report order) does not depend on load order. Callers hold mu,
// which also keeps publications in order.
func (i *Index) publish() {
	i.target.SetRules(i.merged())
	for _, fn := range i.changed {
		fn()
	}
}

func (i *Index) merged() []*engine.Rule {
	var all []*engine.Rule
	for _, k := range slices.Sorted(maps.Keys(i.sources)) {
		all = append(all, i.sources[k]...)
	}
	return all
}

// Rules returns the merged rule set.
func (i *Index) Rules() []*engine.Rule {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.merged()
}
