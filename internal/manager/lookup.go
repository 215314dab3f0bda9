package manager

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
)

// LookupConfig configures cross-resource lookups (cluster.* in rules),
// which serve admission and audit alike.
type LookupConfig struct {
	// MaxDependencies bounds the dependency index: (rule, object, read)
	// entries kept to re-evaluate an object when what it read changes.
	MaxDependencies int
	// CycleLimit re-evaluations of one rule on one object are allowed per
	// CycleWindow; more are suppressed, counted, and coalesced into one
	// trailing re-evaluation when the window allows.
	CycleLimit  int
	CycleWindow time.Duration
}

func defaultLookup() LookupConfig {
	return LookupConfig{MaxDependencies: lookup.DefaultMaxDependencies, CycleLimit: lookup.DefaultCycleLimit, CycleWindow: lookup.DefaultCycleWindow}
}

// lookups is the cross-resource lookup machinery: the binder of `cluster`
// in the engine, and the watcher that keeps the cache warm for the rules'
// lookups and turns changes into re-evaluations.
type lookups struct {
	binder  *lookup.Lookups
	watcher *lookup.Watcher
	status  *rule.LookupStatus
	// rules hears of CRD changes too: a rule matching a kind not served
	// yet turns Ready when it is. index is told when a CRD is deleted, so
	// the layers drop what they watched of it.
	rules *rule.CRLoader
	index *rule.Index
	// cache is the one lookup view of the cluster cache the binder and the
	// watcher share: the binder's reads are served from the watches the
	// watcher holds, each object decoded once for every evaluation.
	cache *lookup.SharedCache
}

// newLookups builds the binder over the shared cluster cache; the index
// records reads only when audit runs, since only audit re-evaluates.
func newLookups(restCfg *rest.Config, cache *clustercache.Cache, cfg *Config, log *slog.Logger) (*lookups, *lookup.DepIndex, error) {
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("lookups: dynamic client: %w", err)
	}
	var index *lookup.DepIndex
	if cfg.Audit.Enabled {
		index = lookup.NewDepIndex(cfg.Lookup.MaxDependencies)
	}
	shared := lookup.NewSharedCache(cache)
	b := lookup.New(lookup.Options{Cache: shared, API: lookup.DynamicAPI{Client: dyn}, Resolver: shared, Index: index, Logger: log})
	return &lookups{binder: b, cache: shared}, index, nil
}

// start adds the watcher and the rule status writer once the engine exists.
func (l *lookups) start(mgr ctrl.Manager, restCfg *rest.Config, eng *engine.Engine, index *lookup.DepIndex,
	cfg *Config, reg prometheus.Registerer, log *slog.Logger) error {
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("lookups: client: %w", err)
	}
	l.watcher = lookup.NewWatcher(lookup.WatcherOptions{
		Engine: eng, Cache: l.cache, Resolver: l.cache, Index: index,
		Access:     lookup.AccessReview{Client: cs.AuthorizationV1().SelfSubjectAccessReviews()},
		CycleLimit: cfg.Lookup.CycleLimit, CycleWindow: cfg.Lookup.CycleWindow, MaxPending: cfg.Lookup.MaxDependencies,
		Metrics: lookup.NewMetrics(reg, index), Logger: log.With("layer", "lookup"), Clock: cfg.Clock,
		OnStatus: func(k lookup.RuleKey) {
			if l.status != nil {
				l.status.Changed(k.Kind, k.Namespace, k.Name)
			}
		},
	})
	if err := mgr.Add(l.watcher); err != nil {
		return err
	}
	if !cfg.Admission.Enabled && !cfg.Audit.Enabled && !cfg.Runtime.Enabled {
		// No layer evaluates rules here (a split-mode WAF component),
		// and the chart grants no CRD reads.
		return nil
	}
	// A rule may read or match a custom resource whose CRD comes later:
	// watch the CRDs' metadata (not their schemas, which can be megabytes
	// each) and resolve such rules again when one appears or changes.
	return mgr.Add(crmanager.RunnableFunc(func(ctx context.Context) error {
		crds := &metav1.PartialObjectMetadata{}
		crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		inf, err := mgr.GetCache().GetInformer(ctx, crds)
		if err != nil {
			log.Warn("lookups: CustomResourceDefinitions not watched; a rule reading a resource whose CRD comes later is resolved again only when it changes", "error", err)
			return nil
		}
		notify := func(any) {
			l.watcher.ResourcesChanged()
			if l.rules != nil {
				l.rules.ResourcesChanged()
			}
		}
		handlers := toolscache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(_, o any) { notify(o) }}
		if m, ok := mgr.GetRESTMapper().(*forgettingMapper); ok {
			// A deleted CRD: once discovery has dropped it, every rule's
			// kinds are asked about again (a rule whose kind went turns
			// KindNotServed) and the layers resolve theirs again (audit
			// stops the informer of a resource that is gone).
			gone := newDeletedCRDs(m, cfg.Clock, log, func() {
				l.watcher.ResourcesChanged()
				if l.rules != nil {
					l.rules.ResourcesRemoved()
				}
				if l.index != nil {
					l.index.Republish()
				}
			})
			go gone.run(ctx)
			handlers.AddFunc = func(o any) { gone.added(o); notify(o) }
			handlers.DeleteFunc = gone.deleted
		}
		_, err = inf.AddEventHandler(handlers)
		return err
	}))
}

// lookupSource tells the rule status writer what the watcher made of each
// rule's lookups; the two layers meet here, not through each other.
type lookupSource struct{ w *lookup.Watcher }

func (s lookupSource) LookupState(kind, namespace, name string) (rule.LookupState, bool) {
	st, ok := s.w.Status(lookup.RuleKey{Kind: kind, Namespace: namespace, Name: name})
	if !ok {
		return rule.LookupState{}, false
	}
	return rule.LookupState{Reads: st.Resources, Ready: st.Reason == lookup.ReasonLookupsReady, Reason: st.Reason, Message: st.Message}, true
}
