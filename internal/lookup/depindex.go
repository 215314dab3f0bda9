package lookup

import (
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultMaxDependencies bounds the dependency index.
const DefaultMaxDependencies = 500_000

// Dependent is a rule's evaluation of one object: what is evaluated again
// when something it read changes.
type Dependent struct {
	Rule   RuleKey
	Object ObjectKey
}

// Read is one lookup an evaluation made: an object by name (Name set, even
// when it did not exist, so that its creation counts), or a list of a
// namespace ("" for all) through Selector.
type Read struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
	Selector  labels.Selector
}

// Reads are keyed by group and resource: the version an object was read or
// watched in does not change what it is.
type objRead struct {
	gr        schema.GroupResource
	namespace string
	name      string
}

type scopeRead struct {
	gr        schema.GroupResource
	namespace string
}

// DepIndex is the inverse index from what was read to the evaluations that
// read it, bounded to a number of (evaluation, read) entries: past it an
// entry is dropped, and the next event on the dependent object itself, or
// the periodic resync, brings its finding up to date. It is safe for
// concurrent use.
//
// The entries are counted per tenant (the rule's namespace, or for a
// cluster rule the evaluated object's), and the one dropped is the least
// recently recorded of the tenant holding the most: one namespace whose
// rules read thousands of objects evicts its own entries, not every other
// namespace's, once the index is full.
type DepIndex struct {
	mu      sync.Mutex
	max     int
	deps    map[Dependent]*depNode
	objs    map[objRead]*readers
	scopes  map[scopeRead]*readers
	tenants map[string]*tenantEntries
	// byCount holds the tenants by their number of entries, and most is
	// the largest number, so the fullest tenant is found in constant time.
	byCount map[int]map[*tenantEntries]struct{}
	most    int
	n       int
	evicted uint64
}

// tenantEntries are one tenant's entries: lru is a ring through a
// sentinel, lru.next the newest.
type tenantEntries struct {
	name string
	lru  entry
	n    int
}

// tenantOf is whose share an evaluation's reads count against.
func tenantOf(dep Dependent) string {
	if dep.Rule.Namespace != "" {
		return dep.Rule.Namespace
	}
	return dep.Object.Namespace
}

// readers are the entries of one read object or scope. Most objects are read
// by one evaluation; a map is made only for the second.
type readers struct {
	one  *entry
	many map[*depNode]*entry
}

func (r *readers) get(n *depNode) *entry {
	if r == nil {
		return nil
	}
	if r.one != nil && r.one.node == n {
		return r.one
	}
	return r.many[n]
}

func (r *readers) put(e *entry) {
	if r.one == nil && r.many == nil {
		r.one = e
		return
	}
	if r.many == nil {
		r.many = map[*depNode]*entry{r.one.node: r.one}
		r.one = nil
	}
	r.many[e.node] = e
}

// del removes n's entry and reports whether none is left.
func (r *readers) del(n *depNode) bool {
	if r.one != nil && r.one.node == n {
		r.one = nil
	}
	delete(r.many, n)
	return r.one == nil && len(r.many) == 0
}

func (r *readers) each(fn func(*depNode, *entry)) {
	if r == nil {
		return
	}
	if r.one != nil {
		fn(r.one.node, r.one)
	}
	for n, e := range r.many {
		fn(n, e)
	}
}

type depNode struct {
	dep     Dependent
	tenant  *tenantEntries
	entries []*entry
}

// entry is one (evaluation, read). key is the object read, or with isScope
// the namespace listed (its name empty).
type entry struct {
	node       *depNode
	key        objRead
	isScope    bool
	sel        labels.Selector
	prev, next *entry
}

func (e *entry) scope() scopeRead { return scopeRead{gr: e.key.gr, namespace: e.key.namespace} }

// NewDepIndex returns an index of at most max entries (DefaultMaxDependencies
// when max <= 0).
func NewDepIndex(max int) *DepIndex {
	if max <= 0 {
		max = DefaultMaxDependencies
	}
	return &DepIndex{max: max, deps: map[Dependent]*depNode{}, objs: map[objRead]*readers{}, scopes: map[scopeRead]*readers{},
		tenants: map[string]*tenantEntries{}, byCount: map[int]map[*tenantEntries]struct{}{}}
}

// Add records that dep read r.
func (d *DepIndex) Add(dep Dependent, r Read) {
	d.mu.Lock()
	defer d.mu.Unlock()
	node := d.deps[dep]
	if node == nil {
		name := tenantOf(dep)
		t := d.tenants[name]
		if t == nil {
			t = &tenantEntries{name: name}
			t.lru.next, t.lru.prev = &t.lru, &t.lru
			d.tenants[name] = t
		}
		node = &depNode{dep: dep, tenant: t}
		d.deps[dep] = node
	}
	if r.Name != "" || r.Selector == nil {
		k := objRead{gr: r.GVR.GroupResource(), namespace: r.Namespace, name: r.Name}
		m := d.objs[k]
		if e := m.get(node); e != nil {
			d.touch(e)
			return
		}
		if m == nil {
			m = &readers{}
			d.objs[k] = m
		}
		e := &entry{node: node, key: k}
		m.put(e)
		d.insert(e)
		return
	}
	k := scopeRead{gr: r.GVR.GroupResource(), namespace: r.Namespace}
	m := d.scopes[k]
	if e := m.get(node); e != nil {
		// Two lists of one scope with different selectors: any change in
		// the scope may matter.
		if e.sel.String() != r.Selector.String() {
			e.sel = labels.Everything()
		}
		d.touch(e)
		return
	}
	if m == nil {
		m = &readers{}
		d.scopes[k] = m
	}
	e := &entry{node: node, key: objRead{gr: k.gr, namespace: k.namespace}, isScope: true, sel: r.Selector}
	m.put(e)
	d.insert(e)
}

func (d *DepIndex) insert(e *entry) {
	e.node.entries = append(e.node.entries, e)
	t := e.node.tenant
	e.prev, e.next = &t.lru, t.lru.next
	t.lru.next.prev = e
	t.lru.next = e
	d.count(t, +1)
	d.n++
	for d.n > d.max {
		var fullest *tenantEntries
		for t := range d.byCount[d.most] {
			fullest = t
			break
		}
		d.remove(fullest.lru.prev, true)
		d.evicted++
	}
}

// count moves t's number of entries by delta, keeping byCount and most.
func (d *DepIndex) count(t *tenantEntries, delta int) {
	if set := d.byCount[t.n]; set != nil {
		delete(set, t)
		if len(set) == 0 {
			delete(d.byCount, t.n)
			if t.n == d.most {
				d.most += min(delta, 0)
			}
		}
	}
	t.n += delta
	if t.n == 0 {
		delete(d.tenants, t.name)
		return
	}
	set := d.byCount[t.n]
	if set == nil {
		set = map[*tenantEntries]struct{}{}
		d.byCount[t.n] = set
	}
	set[t] = struct{}{}
	d.most = max(d.most, t.n)
}

func (d *DepIndex) touch(e *entry) {
	t := e.node.tenant
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = &t.lru, t.lru.next
	t.lru.next.prev = e
	t.lru.next = e
}

// remove unlinks e; unlinkNode also drops it from its node's entries.
func (d *DepIndex) remove(e *entry, unlinkNode bool) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	d.count(e.node.tenant, -1)
	d.n--
	if e.isScope {
		if m := d.scopes[e.scope()]; m != nil && m.del(e.node) {
			delete(d.scopes, e.scope())
		}
	} else if m := d.objs[e.key]; m != nil && m.del(e.node) {
		delete(d.objs, e.key)
	}
	if !unlinkNode {
		return
	}
	n := e.node
	for i, x := range n.entries {
		if x == e {
			n.entries = append(n.entries[:i], n.entries[i+1:]...)
			break
		}
	}
	if len(n.entries) == 0 {
		delete(d.deps, n.dep)
	}
}

// Forget drops everything dep read: it is about to be evaluated again and
// will record its new reads.
func (d *DepIndex) Forget(dep Dependent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if node := d.deps[dep]; node != nil {
		d.drop(node)
	}
}

// ForgetRules drops everything the evaluations of the rules keep does not
// keep read: those rules are gone, disabled or read nothing any more, and
// their entries would only hold memory and requeue objects for nothing
// until the LRU took them.
func (d *DepIndex) ForgetRules(keep func(RuleKey) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for dep, node := range d.deps {
		if !keep(dep.Rule) {
			d.drop(node)
		}
	}
}

func (d *DepIndex) drop(node *depNode) {
	for _, e := range node.entries {
		d.remove(e, false)
	}
	delete(d.deps, node.dep)
}

// Affected returns the evaluations that read the object gvr ns/name: by its
// name, or through a list of its namespace (or of all namespaces) whose
// selector selects any of the given label sets (its labels before and after
// the change).
func (d *DepIndex) Affected(gvr schema.GroupVersionResource, ns, name string, sets ...labels.Labels) []Dependent {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Dependent
	seen := map[*depNode]bool{}
	gr := gvr.GroupResource()
	d.objs[objRead{gr: gr, namespace: ns, name: name}].each(func(node *depNode, _ *entry) {
		seen[node] = true
		out = append(out, node.dep)
	})
	scopes := []scopeRead{{gr: gr, namespace: ns}}
	if ns != "" {
		scopes = append(scopes, scopeRead{gr: gr})
	}
	for _, k := range scopes {
		d.scopes[k].each(func(node *depNode, e *entry) {
			if seen[node] || !selectsAny(e.sel, sets) {
				return
			}
			seen[node] = true
			out = append(out, node.dep)
		})
	}
	return out
}

func selectsAny(sel labels.Selector, sets []labels.Labels) bool {
	if sel.Empty() {
		return true
	}
	for _, s := range sets {
		if s != nil && sel.Matches(s) {
			return true
		}
	}
	return false
}

// Reading returns the evaluations that read any object of gvr in namespace
// ("" for every namespace).
func (d *DepIndex) Reading(gvr schema.GroupVersionResource, namespace string) []Dependent {
	d.mu.Lock()
	defer d.mu.Unlock()
	gr := gvr.GroupResource()
	seen := map[*depNode]bool{}
	var out []Dependent
	add := func(node *depNode) {
		if !seen[node] {
			seen[node] = true
			out = append(out, node.dep)
		}
	}
	for k, m := range d.objs {
		if k.gr == gr && (namespace == "" || k.namespace == namespace) {
			m.each(func(n *depNode, _ *entry) { add(n) })
		}
	}
	for k, m := range d.scopes {
		if k.gr == gr && (namespace == "" || k.namespace == namespace || k.namespace == "") {
			m.each(func(n *depNode, _ *entry) { add(n) })
		}
	}
	return out
}

// Len returns the number of entries.
func (d *DepIndex) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// Evicted returns how many entries the bound has dropped.
func (d *DepIndex) Evicted() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.evicted
}
