package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReasonLegacyDestinationRuleDeleted is the reason of the event on the
// shared DestinationRule of earlier releases when Portal deletes it.
const ReasonLegacyDestinationRuleDeleted = "LegacyDestinationRuleDeleted"

// LabelPartOf is the label naming the Portal installation (--operator-name)
// on the objects it shares between Engines in its namespace.
const LabelPartOf = "app.kubernetes.io/part-of"

// legacyRetry is the wait between attempts when the API server fails.
const legacyRetry = 30 * time.Second

// LegacyDestinationRuleName is the DestinationRule releases before per-Engine
// TLS applied in Portal's namespace with --operator-name: one, shared by
// every Engine, without the cache's CA.
func LegacyDestinationRuleName(operatorName string) string { return operatorName + "-waf-cache" }

// legacyCleanup deletes the legacy DestinationRule once, when the manager
// starts (on the leader): each istio-wasm Engine now has its own, and an
// upgraded cluster would otherwise keep the old one forever. It deletes it
// only when Portal made it: Portal's labels and field manager, no owner,
// and the uid and resourceVersion it checked (so an object replaced in
// between is left alone).
type legacyCleanup struct {
	client                  client.Writer
	reader                  client.Reader
	namespace, operatorName string
	log                     *slog.Logger
	recorder                events.EventRecorder
}

func (r *Reconciler) legacyCleanup() *legacyCleanup {
	return &legacyCleanup{client: r.client, reader: r.reader, namespace: r.opts.Namespace, operatorName: r.opts.OperatorName,
		log: r.opts.Logger, recorder: r.opts.Recorder}
}

// Start runs the cleanup, retrying while the API server fails, and never
// fails the manager: the old rule is harmless beside the Engines' own.
func (c *legacyCleanup) Start(ctx context.Context) error {
	_ = wait.PollUntilContextCancel(ctx, legacyRetry, true, func(ctx context.Context) (bool, error) {
		if err := c.run(ctx); err != nil {
			c.log.Warn("legacy DestinationRule not removed yet; retrying", "namespace", c.namespace,
				"name", LegacyDestinationRuleName(c.operatorName), "error", err)
			return false, nil
		}
		return true, nil
	})
	return nil
}

func (c *legacyCleanup) run(ctx context.Context) error {
	name := LegacyDestinationRuleName(c.operatorName)
	dr := &unstructured.Unstructured{}
	dr.SetGroupVersionKind(DestinationRuleGVK)
	err := c.reader.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, dr)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return nil
	case apierrors.IsForbidden(err):
		c.log.Info("cannot read the legacy DestinationRule; if it exists, delete it by hand", "namespace", c.namespace, "name", name, "error", err)
		return nil
	case err != nil:
		return fmt.Errorf("read DestinationRule %s/%s: %w", c.namespace, name, err)
	}
	if !madeByPortal(dr, c.operatorName) {
		c.log.Info("DestinationRule with the legacy name is not Portal's; left alone", "namespace", c.namespace, "name", name)
		return nil
	}
	uid, rv := dr.GetUID(), dr.GetResourceVersion()
	err = c.client.Delete(ctx, dr, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsForbidden(err):
		c.log.Info("cannot delete the legacy DestinationRule; delete it by hand", "namespace", c.namespace, "name", name, "error", err)
		return nil
	case err != nil:
		return fmt.Errorf("delete DestinationRule %s/%s: %w", c.namespace, name, err)
	}
	const msg = "deleted the shared DestinationRule of earlier releases: each istio-wasm Engine has its own, in its namespace"
	c.log.Info(msg, "namespace", c.namespace, "name", name)
	if c.recorder != nil {
		c.recorder.Eventf(dr, nil, "Normal", ReasonLegacyDestinationRuleDeleted, "Delete", "%s", msg)
	}
	return nil
}

// madeByPortal reports whether u carries what Portal's earlier releases
// applied it with: its managed-by and part-of labels, Portal's field
// manager, and no owner (an Engine's own rules have one).
func madeByPortal(u *unstructured.Unstructured, operatorName string) bool {
	l := u.GetLabels()
	if l[LabelManagedBy] != FieldOwner || l[LabelPartOf] != operatorName || len(u.GetOwnerReferences()) > 0 {
		return false
	}
	return slices.ContainsFunc(u.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool { return m.Manager == FieldOwner })
}
