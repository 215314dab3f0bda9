package admission

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	arv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/core"
)

// Defaults of the ValidatingWebhookConfiguration.
const (
	// ConfigName is the default name of the ValidatingWebhookConfiguration.
	ConfigName = "portal"
	// WebhookName names its webhook for the kinds cluster-wide rules
	// (PortalClusterRules, rule files) match, in every namespace but the
	// excluded ones.
	WebhookName = "validate.portal.io"
	// NamespacedWebhookName names the first of its webhooks for the kinds
	// only PortalRules match. Each of them admits the kinds of one group of
	// namespaces whose PortalRules match the same kinds, in those
	// namespaces only, so one team's rule never puts other namespaces'
	// writes on Portal's path; the others are named
	// namespaced-N.validate.portal.io (scope.go). With no such kind the
	// first one's rules are empty: it intercepts nothing.
	NamespacedWebhookName = "namespaced.validate.portal.io"
	// FieldOwner is the server-side apply field manager.
	FieldOwner = "portal"
	// TimeoutSeconds is how long the API server waits for Portal.
	TimeoutSeconds = 5
)

// GVKSource lists the kinds the loaded, enabled rules of a mode match, each
// with nil when a cluster-wide rule matches it, else the namespaces of the
// namespaced rules that do; *engine.Engine is one.
type GVKSource interface {
	GVKNamespaces(m core.Mode) map[core.GVK][]string
}

// ServiceReference locates the webhook Service in a cluster.
type ServiceReference struct {
	Namespace string
	Name      string
	// Port of the Service; 0 means 443.
	Port int32
}

// ConfigOptions configure the ValidatingWebhookConfiguration.
type ConfigOptions struct {
	// Client writes the configuration (server-side apply). Required.
	Client client.Client
	// Reader reads the live configuration, to find namespaced webhooks
	// that are no longer needed; mgr.GetAPIReader(), so no informer caches
	// every webhook configuration. Default Client.
	Reader client.Reader
	// Mapper resolves each kind to its resource (mgr.GetRESTMapper()).
	// Required.
	Mapper meta.RESTMapper
	// Rules lists the kinds the admission rules match. Required.
	Rules GVKSource
	// Name of the configuration. Default ConfigName.
	Name string
	// Namespace is Portal's own namespace, always excluded. Required.
	Namespace string
	// Service points the API server at the webhook Service (in a cluster).
	Service *ServiceReference
	// URL points the API server at an https URL instead, such as
	// LocalURL(port) outside a cluster (tests, portal dev). Exactly one of
	// Service and URL is set.
	URL string
	// FailOpen sets failurePolicy Ignore: the API server admits requests
	// when Portal cannot be reached. Default Fail.
	FailOpen bool
	// CABundle returns the PEM CA that signs the serving certificate. It is
	// read at every apply; call Notify when it changes. Nothing is applied
	// while it returns nothing. Required.
	CABundle func() []byte
	// RulesLoaded, when set, delays the first apply until it is closed, so
	// a restart never narrows the webhook to a partial rule set.
	RulesLoaded <-chan struct{}
	// Logger, default slog.Default().
	Logger *slog.Logger
	// RetryInterval is how soon a failed apply, a missing CA bundle or a
	// kind the API server does not serve (yet) is retried. Default 10s.
	RetryInterval time.Duration
}

// LocalURL is the webhook URL on 127.0.0.1 at port, for ConfigOptions.URL.
func LocalURL(port int) string { return fmt.Sprintf("https://127.0.0.1:%d%s", port, Path) }

// ConfigManager keeps the ValidatingWebhookConfiguration in line with the
// admission rules: one webhook whose rules cover the kinds the loaded,
// enabled cluster-wide admission rules match, and, when PortalRules match
// kinds no cluster-wide rule does, a second webhook for those kinds limited
// to the PortalRules' namespaces. A webhook with nothing to match keeps an
// empty rules list, which intercepts nothing. It is a leader-elected
// manager.Runnable; it applies at start, on Notify, and when the rule set
// handed to a Watch target changes the kinds. It never deletes the
// configuration: a stopped Portal stays fail-closed.
type ConfigManager struct {
	o      ConfigOptions
	notify chan struct{}

	mu sync.Mutex
	// last is the configuration last applied, to skip identical applies.
	last []byte
	// unresolved holds the kinds the mapper could not resolve, logged once.
	unresolved map[core.GVK]bool
	// waitingForCA is set once the missing CA bundle has been logged.
	waitingForCA bool
}

// NewConfigManager checks o and returns the manager.
func NewConfigManager(o ConfigOptions) (*ConfigManager, error) {
	var errs []error
	if o.Client == nil || o.Mapper == nil || o.Rules == nil || o.CABundle == nil {
		errs = append(errs, errors.New("options Client, Mapper, Rules and CABundle are required"))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("option Namespace (Portal's own, always excluded) is required"))
	}
	if (o.Service == nil) == (o.URL == "") {
		errs = append(errs, errors.New("set exactly one of Service and URL"))
	}
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("URL %q is not an https URL", o.URL))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("admission config: %w", err)
	}
	if o.Name == "" {
		o.Name = ConfigName
	}
	if o.Reader == nil {
		o.Reader = o.Client
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 10 * time.Second
	}
	return &ConfigManager{o: o, notify: make(chan struct{}, 1), unresolved: map[core.GVK]bool{}}, nil
}

// Notify asks for the configuration to be applied again: call it when the CA
// bundle changes. It never blocks.
func (m *ConfigManager) Notify() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: one replica
// writes the configuration.
func (m *ConfigManager) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable. It applies until ctx ends.
func (m *ConfigManager) Start(ctx context.Context) error {
	if m.o.RulesLoaded != nil {
		select {
		case <-m.o.RulesLoaded:
		case <-ctx.Done():
			return nil
		}
	}
	retry := time.NewTimer(m.o.RetryInterval)
	defer retry.Stop()
	for {
		if m.Sync(ctx) {
			retry.Reset(m.o.RetryInterval)
		} else {
			retry.Stop()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.notify:
		case <-retry.C:
		}
	}
}

// Sync applies the configuration once, unless it is unchanged since the last
// successful apply. It reports whether something is left to retry: a failed
// apply, a missing CA bundle, or a kind the API server does not serve.
func (m *ConfigManager) Sync(ctx context.Context) (retry bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ca := m.o.CABundle()
	if len(ca) == 0 {
		if !m.waitingForCA {
			m.waitingForCA = true
			m.o.Logger.Info("webhook configuration not applied yet: waiting for the CA bundle", "name", m.o.Name)
		}
		return true
	}
	m.waitingForCA = false
	ws, unresolved := m.webhookRules()
	stale, err := m.staleWebhooks(ctx, max(len(ws.namespaced), 1))
	if err != nil {
		m.o.Logger.Error("cannot apply the webhook configuration", "name", m.o.Name, "error", err, "retryIn", m.o.RetryInterval.String())
		return true
	}
	cfg := m.desired(ws, stale, ca)
	data, err := json.Marshal(cfg)
	if err != nil {
		m.o.Logger.Error("cannot encode the webhook configuration", "error", err)
		return true
	}
	if bytes.Equal(data, m.last) {
		return unresolved
	}
	if err := m.o.Client.Apply(ctx, cfg, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		m.last = nil
		m.o.Logger.Error("cannot apply the webhook configuration", "name", m.o.Name, "error", err, "retryIn", m.o.RetryInterval.String())
		return true
	}
	if len(stale) > 0 {
		if err := m.pruneWebhooks(ctx, stale); err != nil {
			// The stale webhooks are empty now: they intercept nothing
			// until the retry removes them.
			m.o.Logger.Error("cannot remove namespaced webhooks no longer needed", "name", m.o.Name, "error", err, "retryIn", m.o.RetryInterval.String())
			return true
		}
	}
	m.last = data
	m.logApplied(ws, stale)
	return unresolved
}

func (m *ConfigManager) logApplied(ws webhookSet, removed []string) {
	namespaces := 0
	for _, w := range ws.namespaced {
		namespaces += len(w.namespaces)
	}
	m.o.Logger.Info("webhook configuration applied", "name", m.o.Name, "resources", describeRules(ws.cluster),
		"namespacedWebhooks", len(ws.namespaced), "tenantNamespaces", namespaces, "removedWebhooks", removed,
		"failurePolicy", string(m.failurePolicy()))
	if ws.merged > 0 {
		m.o.Logger.Warn("PortalRules' namespaces match more distinct kind sets than there are namespaced webhooks: the smallest groups share the last one, which admits the union of their kinds in all of their namespaces",
			"name", m.o.Name, "maxNamespacedWebhooks", MaxNamespacedWebhooks, "sharedGroups", ws.merged)
	}
}

func (m *ConfigManager) failurePolicy() admissionregistrationv1.FailurePolicyType {
	if m.o.FailOpen {
		return admissionregistrationv1.Ignore
	}
	return admissionregistrationv1.Fail
}

// desired is the whole configuration Portal owns; stale names namespaced
// webhooks applied empty before they are removed.
func (m *ConfigManager) desired(ws webhookSet, stale []string, ca []byte) *arv1ac.ValidatingWebhookConfigurationApplyConfiguration {
	cc := func() *arv1ac.WebhookClientConfigApplyConfiguration {
		cc := arv1ac.WebhookClientConfig().WithCABundle(ca...)
		if s := m.o.Service; s != nil {
			svc := arv1ac.ServiceReference().WithNamespace(s.Namespace).WithName(s.Name).WithPath(Path).WithPort(443)
			if s.Port != 0 {
				svc.WithPort(s.Port)
			}
			return cc.WithService(svc)
		}
		return cc.WithURL(m.o.URL)
	}
	webhook := func(name string, rules []*arv1ac.RuleWithOperationsApplyConfiguration, op metav1.LabelSelectorOperator, namespaces []string) *arv1ac.ValidatingWebhookApplyConfiguration {
		return arv1ac.ValidatingWebhook().
			WithName(name).
			WithClientConfig(cc()).
			WithRules(rules...).
			WithFailurePolicy(m.failurePolicy()).
			WithMatchPolicy(admissionregistrationv1.Equivalent).
			WithNamespaceSelector(metav1ac.LabelSelector().WithMatchExpressions(
				metav1ac.LabelSelectorRequirement().
					WithKey(corev1NamespaceNameLabel).
					WithOperator(op).
					WithValues(namespaces...))).
			WithSideEffects(admissionregistrationv1.SideEffectClassNone).
			WithTimeoutSeconds(TimeoutSeconds).
			WithAdmissionReviewVersions("v1")
	}
	webhooks := []*arv1ac.ValidatingWebhookApplyConfiguration{webhook(WebhookName, ws.cluster, metav1.LabelSelectorOpNotIn, m.excluded())}
	for i, w := range ws.namespaced {
		webhooks = append(webhooks, webhook(namespacedName(i), w.rules, metav1.LabelSelectorOpIn, w.namespaces))
	}
	// The first namespaced webhook stays, with no rules, when no PortalRule
	// needs it: removing it would leave behind the caBundle the certificate
	// injector co-owns, a stub the API server rejects (see staleWebhooks).
	empty := stale
	if len(ws.namespaced) == 0 {
		empty = append([]string{NamespacedWebhookName}, stale...)
	}
	for _, name := range empty {
		webhooks = append(webhooks, webhook(name, nil, metav1.LabelSelectorOpNotIn, m.excluded()))
	}
	return arv1ac.ValidatingWebhookConfiguration(m.o.Name).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": "portal"}).
		WithWebhooks(webhooks...)
}

// excluded lists the namespaces admission never sees, sorted.
func (m *ConfigManager) excluded() []string {
	return slices.Compact(slices.Sorted(slices.Values(append(core.SystemNamespaces(), m.o.Namespace))))
}

// corev1NamespaceNameLabel is set by the API server on every namespace to
// its name.
const corev1NamespaceNameLabel = "kubernetes.io/metadata.name"

// webhookSet is the webhook rules of the webhooks: cluster for the kinds a
// cluster-wide rule matches, namespaced for the others, each admitted only
// in its namespaces (never an excluded one).
type webhookSet struct {
	cluster    []*arv1ac.RuleWithOperationsApplyConfiguration
	namespaced []nsWebhook
	// merged counts the groups of namespaces that share the last namespaced
	// webhook because of MaxNamespacedWebhooks.
	merged int
}

// gv is a group and version of webhook rules; version "*" for any.
type gv struct{ group, version string }

// webhookRules maps the admission rules' kinds to webhook rules, one per
// group and version, in a stable order: those of cluster-wide rules for every
// namespace, those of PortalRules for their own namespaces only. Kinds the
// mapper cannot resolve are logged once and left out; unresolved reports
// whether there were any.
func (m *ConfigManager) webhookRules() (ws webhookSet, unresolved bool) {
	cluster := map[gv]map[string]bool{}
	perNS := map[string]map[gv]map[string]bool{}
	excluded := m.excluded()
	seen := map[core.GVK]bool{}
	for g, nss := range m.o.Rules.GVKNamespaces(core.ModeAdmission) {
		seen[g] = true
		resources, err := m.resources(g)
		if err != nil {
			unresolved = true
			if !m.unresolved[g] {
				m.unresolved[g] = true
				m.o.Logger.Warn("admission rule kind not served by the API server: left out of the webhook, retrying",
					"kind", g.String(), "error", err, "retryIn", m.o.RetryInterval.String())
			}
			continue
		}
		if m.unresolved[g] {
			delete(m.unresolved, g)
			m.o.Logger.Info("admission rule kind resolved", "kind", g.String(), "resources", resources)
		}
		k := gv{g.Group, cmp.Or(g.Version, "*")}
		if nss == nil {
			addResources(cluster, k, resources)
			continue
		}
		for _, ns := range nss {
			if _, found := slices.BinarySearch(excluded, ns); found {
				continue
			}
			if perNS[ns] == nil {
				perNS[ns] = map[gv]map[string]bool{}
			}
			addResources(perNS[ns], k, resources)
		}
	}
	maps.DeleteFunc(m.unresolved, func(g core.GVK, _ bool) bool { return !seen[g] })
	ws.cluster = ruleList(cluster, nil, admissionregistrationv1.AllScopes)
	// PortalRules never match cluster-scoped objects, which a namespace
	// selector would not filter.
	ws.namespaced, ws.merged = groupNamespaces(perNS, cluster)
	return ws, unresolved
}

func addResources(byGV map[gv]map[string]bool, k gv, resources []string) {
	if byGV[k] == nil {
		byGV[k] = map[string]bool{}
	}
	for _, r := range resources {
		byGV[k][r] = true
	}
}

// ruleList turns resources by group and version into webhook rules in a
// stable order. It leaves out a resource already matched for every version
// of its group, and any resource covered (by the cluster-wide webhook)
// matches for the same version or every version.
func ruleList(byGV, covered map[gv]map[string]bool, scope admissionregistrationv1.ScopeType) []*arv1ac.RuleWithOperationsApplyConfiguration {
	keys := slices.SortedFunc(maps.Keys(byGV), func(a, b gv) int {
		if a.group != b.group {
			return cmp.Compare(a.group, b.group)
		}
		return cmp.Compare(a.version, b.version)
	})
	var rules []*arv1ac.RuleWithOperationsApplyConfiguration
	for _, k := range keys {
		res := maps.Clone(byGV[k])
		drop := func(m map[string]bool) { maps.DeleteFunc(res, func(r string, _ bool) bool { return m[r] }) }
		if k.version != "*" {
			drop(byGV[gv{k.group, "*"}])
		}
		drop(covered[gv{k.group, "*"}])
		drop(covered[k])
		if len(res) == 0 {
			continue
		}
		rules = append(rules, arv1ac.RuleWithOperations().
			WithOperations(admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete).
			WithAPIGroups(k.group).
			WithAPIVersions(k.version).
			WithResources(slices.Sorted(maps.Keys(res))...).
			WithScope(scope))
	}
	return rules
}

// resources returns the resource names a kind is admitted under. Pods also
// get pods/ephemeralcontainers: that subresource adds containers to a running
// pod, and its requests carry the whole Pod.
func (m *ConfigManager) resources(g core.GVK) ([]string, error) {
	var versions []string
	if g.Version != "" {
		versions = []string{g.Version}
	}
	mapping, err := m.o.Mapper.RESTMapping(schema.GroupKind{Group: g.Group, Kind: g.Kind}, versions...)
	if err != nil {
		return nil, err
	}
	plural := mapping.Resource.Resource
	if g.Group == "" && g.Kind == "Pod" {
		return []string{plural, plural + "/ephemeralcontainers"}, nil
	}
	return []string{plural}, nil
}

// describeRules lists the resources of the webhook rules for the log.
func describeRules(rules []*arv1ac.RuleWithOperationsApplyConfiguration) []string {
	var out []string
	for _, r := range rules {
		for _, res := range r.Resources {
			group := r.APIGroups[0]
			if group == "" {
				group = "core"
			}
			out = append(out, fmt.Sprintf("%s/%s %s", group, r.APIVersions[0], res))
		}
	}
	return out
}
