package admission

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	arv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A PortalRule's kinds are admitted through Portal only in its own
// namespace. One webhook per namespace would grow the configuration with the
// tenants; one webhook for all of them (the union of every tenant's kinds
// over the union of their namespaces) lets tenant B's rule on ConfigMaps put
// tenant A's ConfigMap writes behind a fail-closed webhook. So namespaces
// whose PortalRules match the same kinds share one webhook, with a
// namespaceSelector naming them: the configuration grows with the number of
// distinct kind sets (bounded) and the number of namespaces (each named once).

// MaxNamespacedWebhooks bounds the namespaced webhooks. Past it, the groups
// of namespaces with the fewest namespaces share the last webhook: the union
// of their kinds over the union of their namespaces, as every PortalRule was
// admitted before webhooks were per kind set. Portal logs a warning then.
// With about 1 KiB per webhook (its caBundle, its rules) and each tenant
// namespace named once, the configuration stays far below the API server's
// object size limit (about 1.5 MiB in etcd).
const MaxNamespacedWebhooks = 32

// nsWebhook is one namespaced webhook: the webhook rules of the kinds a
// group of namespaces' PortalRules match, and those namespaces, sorted.
type nsWebhook struct {
	rules      []*arv1ac.RuleWithOperationsApplyConfiguration
	namespaces []string
	// byGV are the resources behind rules, to merge groups past the bound.
	byGV map[gv]map[string]bool
}

// namespacedName names the i-th namespaced webhook. The first keeps the name
// of the single namespaced webhook of earlier releases, so an upgrade
// leaves no webhook of the old name behind.
func namespacedName(i int) string {
	if i == 0 {
		return NamespacedWebhookName
	}
	return fmt.Sprintf("namespaced-%d.validate.portal.io", i)
}

// isNumberedNamespacedName reports whether a webhook is a namespaced webhook
// Portal adds and removes as kind sets come and go (all but the first).
func isNumberedNamespacedName(name string) bool {
	n, ok := strings.CutPrefix(name, "namespaced-")
	n, ok2 := strings.CutSuffix(n, ".validate.portal.io")
	return ok && ok2 && n != ""
}

// groupNamespaces turns the resources each namespace's PortalRules match
// into namespaced webhooks: one per set of webhook rules, leaving out what
// the cluster-wide webhook covers, at most MaxNamespacedWebhooks. merged is
// how many groups share the last webhook because of the bound.
func groupNamespaces(perNS map[string]map[gv]map[string]bool, covered map[gv]map[string]bool) (out []nsWebhook, merged int) {
	byKey := map[string]*nsWebhook{}
	for ns, byGV := range perNS {
		rules := ruleList(byGV, covered, admissionregistrationv1.NamespacedScope)
		if len(rules) == 0 {
			continue
		}
		key := strings.Join(describeRules(rules), ",")
		g := byKey[key]
		if g == nil {
			g = &nsWebhook{rules: rules, byGV: byGV}
			byKey[key] = g
		}
		g.namespaces = append(g.namespaces, ns)
	}
	for _, g := range byKey {
		slices.Sort(g.namespaces)
		out = append(out, *g)
	}
	// The largest groups keep a webhook of their own past the bound; the
	// order is stable so an unchanged rule set applies the same webhooks.
	slices.SortFunc(out, func(a, b nsWebhook) int {
		return cmp.Or(cmp.Compare(len(b.namespaces), len(a.namespaces)), cmp.Compare(a.namespaces[0], b.namespaces[0]))
	})
	if len(out) <= MaxNamespacedWebhooks {
		return out, 0
	}
	rest := out[MaxNamespacedWebhooks-1:]
	union := nsWebhook{byGV: map[gv]map[string]bool{}}
	for _, g := range rest {
		for k, res := range g.byGV {
			if union.byGV[k] == nil {
				union.byGV[k] = map[string]bool{}
			}
			for r := range res {
				union.byGV[k][r] = true
			}
		}
		union.namespaces = append(union.namespaces, g.namespaces...)
	}
	slices.Sort(union.namespaces)
	union.rules = ruleList(union.byGV, covered, admissionregistrationv1.NamespacedScope)
	return append(out[:MaxNamespacedWebhooks-1], union), len(rest)
}

// staleWebhooks lists the numbered namespaced webhooks of the live
// configuration past the n Portal applies now. Leaving them out of the apply
// is not enough to remove them: the caBundle injector co-owns each webhook's
// caBundle, and the apply would leave a stub with only that field, which the
// API server rejects. They are applied empty, intercepting nothing, and then
// removed by a patch (pruneWebhooks), which drops every owner's fields.
func (m *ConfigManager) staleWebhooks(ctx context.Context, n int) ([]string, error) {
	live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := m.o.Reader.Get(ctx, types.NamespacedName{Name: m.o.Name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the webhook configuration: %w", err)
	}
	applied := map[string]bool{}
	for i := range n {
		applied[namespacedName(i)] = true
	}
	var stale []string
	for _, w := range live.Webhooks {
		if isNumberedNamespacedName(w.Name) && !applied[w.Name] {
			stale = append(stale, w.Name)
		}
	}
	return stale, nil
}

// pruneWebhooks removes the named webhooks with a strategic merge patch.
func (m *ConfigManager) pruneWebhooks(ctx context.Context, names []string) error {
	type del struct {
		Name  string `json:"name"`
		Patch string `json:"$patch"`
	}
	var p struct {
		Webhooks []del `json:"webhooks"`
	}
	for _, n := range names {
		p.Webhooks = append(p.Webhooks, del{Name: n, Patch: "delete"})
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	vwc.Name = m.o.Name
	if err := m.o.Client.Patch(ctx, vwc, client.RawPatch(types.StrategicMergePatchType, data), client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("remove webhooks %v: %w", names, err)
	}
	return nil
}
