package rule

import (
	"context"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// LookupsFieldOwner is the server-side apply field manager of status.reads
// and the LookupsReady condition.
const LookupsFieldOwner = "portal-lookups"

// LookupState is what the lookup layer made of one rule's cluster.* reads.
type LookupState struct {
	// Reads are the resources read, as group/resource.
	Reads []string
	// Ready, Reason and Message make the LookupsReady condition.
	Ready           bool
	Reason, Message string
}

// LookupSource tells the lookup state of a rule; ok is false for a rule
// without lookups (or gone).
type LookupSource interface {
	LookupState(kind, namespace, name string) (st LookupState, ok bool)
}

// LookupStatus writes status.reads and the LookupsReady condition of the
// rule custom resources from the lookup layer, on the leader, at a bounded
// rate. A rule that loses its lookups loses both.
type LookupStatus struct {
	statusWriter
	client client.Client
	source LookupSource
	loader *CRLoader
}

// NewLookupStatus returns the writer; call Changed for each rule whose
// lookup state changed.
func NewLookupStatus(c client.Client, src LookupSource, l *CRLoader, log *slog.Logger, clk clock.WithTicker) *LookupStatus {
	return &LookupStatus{
		statusWriter: newStatusWriter(writerOptions{name: "portal-rule-lookups", log: log, clock: clk}),
		client:       c, source: src, loader: l,
	}
}

// Changed queues the rule's status for writing; rules that are not custom
// resources are ignored.
func (s *LookupStatus) Changed(kind, namespace, name string) {
	if kind != KindCluster && kind != KindNamespaced {
		return
	}
	s.queue.Add(countKey{kind: kind, namespace: namespace, name: name})
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: one
// replica writes.
func (s *LookupStatus) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable.
func (s *LookupStatus) Start(ctx context.Context) error {
	s.run(ctx, s.write)
	return nil
}

func (s *LookupStatus) write(ctx context.Context, k countKey) {
	st, ok := s.source.LookupState(k.kind, k.namespace, k.name)
	status := map[string]any{}
	if ok {
		// A rule whose lookups resolved to no resource has no reads: a
		// null would fail the CRD's schema and the write would retry forever.
		if len(st.Reads) > 0 {
			status["reads"] = st.Reads
		}
		status["conditions"] = []any{s.condition(policyv1alpha1.ConditionLookupsReady, st.Ready, st.Reason, st.Message, activeGeneration(s.loader, k))}
	}
	err := s.apply(ctx, s.client, k, LookupsFieldOwner, status)
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("rule lookup status not written; retrying", "kind", k.kind, "namespace", k.namespace, "name", k.name, "error", err)
		s.queue.AddAfter(k, lookupRetry)
	}
}

// lookupRetry is how soon a failed status write is tried again.
const lookupRetry = 10 * time.Second
