package rule

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// A rule whose match names a kind the API server does not serve (a typo in
// the group, a CRD not installed yet) loads, and admission and audit pick the
// kind up once it is served; until then it never fires, so its Ready
// condition says so (KindNotServed) instead of True. The answers come from
// the manager's RESTMapper: a served kind is a cache hit, but a kind it does
// not know makes it read the API server's discovery, so such asks share the
// loader's rate limit with the cluster-scope check (discoveryAsks). A kind
// not asked about because the limit was reached keeps its last answer, so
// the condition does not flap; the loader's follower asks again, waiting for
// the limiter, and again whenever a CustomResourceDefinition changes.

// servedCheck is what the loader knows of whether the active generation's
// match kinds are served.
type servedCheck struct {
	kind, namespace, name string
	gvks                  []policyv1alpha1.GroupVersionKind
	// problems holds, per match.gvk entry, why the kind is not served, ""
	// when it is (or was not asked about yet).
	problems []string
	// unasked marks the entries the limiter kept from being asked about.
	unasked []bool
}

// pending reports whether c has an entry to ask about again.
func (c *servedCheck) pending() bool {
	return slices.Contains(c.unasked, true) || slices.ContainsFunc(c.problems, func(p string) bool { return p != "" })
}

// notServed lists the problems of c, in match.gvk order.
func (c *servedCheck) notServed() []string {
	var out []string
	for _, p := range c.problems {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// checkServed asks about the entries of c; with wait false an ask the
// limiter refuses is left for later (the entry keeps its last answer), with
// wait true it waits for the limiter. pass, when set, keeps the answers of
// one pass over many rules: each kind is asked about once in it, however
// many rules match it (a tenant's thousand PortalRules on one made-up kind
// cost one ask, not a thousand). It reports whether an answer changed.
func (l *CRLoader) checkServed(ctx context.Context, c *servedCheck, wait bool, pass map[policyv1alpha1.GroupVersionKind]string) bool {
	changed := false
	for i, g := range c.gvks {
		why, known := pass[g]
		asked := true
		if !known {
			why, asked = l.askServed(ctx, g, wait)
			if asked && pass != nil {
				pass[g] = why
			}
		}
		if !asked {
			c.unasked[i] = true
			continue
		}
		problem := ""
		if why != "" {
			problem = fmt.Sprintf("match.gvk[%d]: %s", i, why)
		}
		c.unasked[i] = false
		if c.problems[i] != problem {
			c.problems[i], changed = problem, true
		}
	}
	return changed
}

// knownServed reports whether g was found served before: such a kind needs
// no ask, nor a token. epoch tells an answer given after the loader forgot
// what it found served (forgetServedLocked) from one given before.
func (l *CRLoader) knownServed(g policyv1alpha1.GroupVersionKind) (known bool, epoch uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served[g], l.servedEpoch
}

// forgetServedLocked forgets the kinds found served: the mapper started
// afresh, and an answer being given meanwhile by the one before is no
// answer (askServed).
func (l *CRLoader) forgetServedLocked() {
	clear(l.served)
	l.servedEpoch++
}

// askServed asks the mapper whether g is served: "" when it is, else why
// not. asked is false when no token was to be had (or ctx ended).
func (l *CRLoader) askServed(ctx context.Context, g policyv1alpha1.GroupVersionKind, wait bool) (why string, asked bool) {
	if l.mapper == nil {
		return "", true
	}
	known, epoch := l.knownServed(g)
	if known {
		return "", true
	}
	if wait {
		if l.discoveryAsks.Wait(ctx) != nil {
			return "", false
		}
	} else if !l.discoveryAsks.Allow() {
		return "", false
	}
	gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
	var versions []string
	if g.Version != "" {
		versions = []string{g.Version}
	}
	_, err := l.mapper.RESTMapping(gk, versions...)
	l.mu.Lock()
	stale := l.servedEpoch != epoch
	if err == nil && !stale {
		// Bounded by the kinds the API server serves.
		l.served[g] = true
	}
	l.mu.Unlock()
	if stale || (err != nil && !meta.IsNoMatchError(err)) {
		// Discovery failed, or a CRD was deleted while the mapper from
		// before answered: no answer, not a "no", nor a "yes".
		return "", false
	}
	if err == nil {
		return "", true
	}
	name := flagKind(gk)
	if g.Version != "" {
		name = g.Version + " " + name
	}
	hint := ""
	if elsewhere := servedElsewhere(l.mapper, g); elsewhere != "" {
		hint = " (" + elsewhere + ")"
	}
	return fmt.Sprintf("%s is not served by the API server%s; the rule applies once it is", name, hint), true
}

// servedElsewhere says where the API server serves g's kind under another
// group or version, the did-you-mean of a typo: "Deployment is served in
// group apps". It reads what the mapper already holds (the kind's singular
// resource name is its lowercased kind), at most one more discovery read.
func servedElsewhere(mapper meta.RESTMapper, g policyv1alpha1.GroupVersionKind) string {
	gvks, err := mapper.KindsFor(schema.GroupVersionResource{Resource: strings.ToLower(g.Kind)})
	if err != nil {
		return ""
	}
	var groups, versions []string
	for _, k := range gvks {
		switch {
		case k.Kind != g.Kind:
		case k.Group != g.Group:
			if !slices.Contains(groups, k.Group) {
				groups = append(groups, k.Group)
			}
		case !slices.Contains(versions, k.Version):
			versions = append(versions, k.Version)
		}
	}
	switch {
	case len(versions) > 0:
		return fmt.Sprintf("%s is served in version %s", flagKind(schema.GroupKind{Group: g.Group, Kind: g.Kind}), strings.Join(versions, ", "))
	case len(groups) > 0:
		for i, gr := range groups {
			if gr == "" {
				groups[i] = `"" (core)`
			}
		}
		return fmt.Sprintf("%s is served in group %s", g.Kind, strings.Join(groups, ", "))
	}
	return ""
}

// ResourcesChanged tells the loader that the API server's resources
// changed (a CustomResourceDefinition was created or became established):
// rules whose kinds were not served are asked about again, so their Ready
// condition follows without an edit. It never blocks.
func (l *CRLoader) ResourcesChanged() {
	select {
	case l.resources <- struct{}{}:
	default:
	}
}

// ResourcesRemoved tells the loader that the API server may serve fewer
// resources (a CustomResourceDefinition was deleted; the RESTMapper given
// to SetupWithManager must have forgotten what it knew): every loaded
// rule's kinds are asked about again, not only those not served, so a rule
// whose kind went says KindNotServed. It never blocks.
func (l *CRLoader) ResourcesRemoved() {
	l.recheckAll.Store(true)
	l.ResourcesChanged()
}

// Start implements manager.Runnable: it asks again about the kinds of rules
// that were not served, or not asked about, whenever resources change, until
// ctx ends.
func (l *CRLoader) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.resources:
			l.recheckServed(ctx)
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica keeps its own load states, which the leader's status writer reads
// after a failover.
func (l *CRLoader) NeedLeaderElection() bool { return false }

func (l *CRLoader) recheckServed(ctx context.Context) {
	all := l.recheckAll.Swap(false)
	l.mu.Lock()
	from := l.unserved
	if all {
		// What was found served may be gone: ask again.
		l.forgetServedLocked()
		from = l.checked
	}
	var todo []*servedCheck
	for _, c := range from {
		todo = append(todo, &servedCheck{kind: c.kind, namespace: c.namespace, name: c.name, gvks: c.gvks,
			problems: slices.Clone(c.problems), unasked: slices.Clone(c.unasked)})
	}
	l.mu.Unlock()
	pass := map[policyv1alpha1.GroupVersionKind]string{}
	for _, c := range todo {
		wasPending := c.pending()
		changed := l.checkServed(ctx, c, true, pass)
		// A rule not answered now (discovery failed) is kept among those
		// asked about again, though its answers did not change.
		if !changed && c.pending() == wasPending {
			continue
		}
		key := crKey(c.kind, c.namespace, c.name)
		l.mu.Lock()
		cur, ok := l.checked[key]
		// A reload meanwhile asked for itself.
		if ok && slices.Equal(cur.gvks, c.gvks) {
			l.setServedLocked(key, c)
		}
		l.mu.Unlock()
		if ok && (changed || wasPending) {
			obj := newRuleObject(c.kind)
			obj.SetNamespace(c.namespace)
			obj.SetName(c.name)
			l.notify(c.kind, obj)
		}
	}
}

// setServedLocked records c as the served answers of rule key: in its load
// state, and among the rules to ask about again while it is pending.
func (l *CRLoader) setServedLocked(key string, c *servedCheck) {
	if c == nil {
		delete(l.unserved, key)
		return
	}
	l.checked[key] = c
	if st, ok := l.states[key]; ok {
		st.NotServed = c.notServed()
		l.states[key] = st
	}
	if c.pending() {
		l.unserved[key] = c
	} else {
		delete(l.unserved, key)
	}
}

// servedOf checks the match kinds of obj, a generation that compiled,
// starting from the answers of its previous generation when it matches the
// same kinds, so a refused ask keeps them.
func (l *CRLoader) servedOf(ctx context.Context, kind string, obj policyv1alpha1.RuleObject) *servedCheck {
	gvks := slices.Clone(obj.GetRuleSpec().Match.GVK)
	c := &servedCheck{kind: kind, namespace: obj.GetNamespace(), name: obj.GetName(), gvks: gvks,
		problems: make([]string, len(gvks)), unasked: make([]bool, len(gvks))}
	l.mu.Lock()
	if prev, ok := l.unserved[crKey(kind, obj.GetNamespace(), obj.GetName())]; ok && slices.Equal(prev.gvks, gvks) {
		copy(c.problems, prev.problems)
		copy(c.unasked, prev.unasked)
	}
	l.mu.Unlock()
	l.checkServed(ctx, c, false, nil)
	if slices.Contains(c.unasked, true) {
		l.ResourcesChanged()
	}
	return c
}
