package engine_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/waf/engine"
	"github.com/vilaca/portal/test/waftest"
)

// legacyDestinationRule is the shared DestinationRule releases before
// per-Engine TLS applied in Portal's namespace with --operator-name, as
// they applied it.
func legacyDestinationRule(ns, operator string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": engine.LegacyDestinationRuleName(operator), "namespace": ns, "labels": map[string]any{
			engine.LabelManagedBy: engine.FieldOwner, engine.LabelPartOf: operator,
		}},
		"spec": map[string]any{
			"host":          "portal-waf-cache." + waftest.Namespace + ".svc.cluster.local",
			"trafficPolicy": map[string]any{"tls": map[string]any{"mode": "SIMPLE", "sni": "portal-waf-cache." + waftest.Namespace + ".svc.cluster.local"}},
		},
	}}
	u.SetGroupVersionKind(engine.DestinationRuleGVK)
	return u
}

// legacyFixture applies the legacy DestinationRule in Portal's namespace
// before the WAF layer starts, as an upgraded cluster has it.
func legacyFixture(cl *devcluster.Cluster) error {
	c, err := client.New(cl.Config, client.Options{})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: waftest.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(legacyDestinationRule(waftest.Namespace, operatorName)),
		client.FieldOwner(engine.FieldOwner), client.ForceOwnership)
}

// An upgraded cluster's shared DestinationRule is deleted when the Engine
// controller starts, with an event on it saying why.
func TestLegacyDestinationRuleDeletedOnStart(t *testing.T) {
	cluster(t)
	name := engine.LegacyDestinationRuleName(operatorName)
	eventually(t, "legacy DestinationRule deleted", func() bool {
		_, ok := object(t, engine.DestinationRuleGVK, waftest.Namespace, name)
		return !ok
	})
	eventually(t, "event "+engine.ReasonLegacyDestinationRuleDeleted, func() bool {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(waftest.Namespace)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == engine.ReasonLegacyDestinationRuleDeleted && e.Regarding.Name == name && e.Regarding.Kind == "DestinationRule" {
				return true
			}
		}
		return false
	})
}

// A DestinationRule with the legacy name that Portal did not make (another
// field manager, with or without Portal's labels, or an owner) is never
// deleted; Portal's own is.
func TestLegacyDestinationRuleOnlyPortals(t *testing.T) {
	cluster(t)
	ns := namespace(t, "legacy-dr")
	ctx := context.Background()
	apply := func(u *unstructured.Unstructured, manager string) {
		t.Helper()
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
	}
	unlabelled := legacyDestinationRule(ns, "unlabelled")
	unlabelled.SetLabels(nil)
	apply(unlabelled, engine.FieldOwner)
	apply(legacyDestinationRule(ns, "copycat"), "kubectl")
	owned := legacyDestinationRule(ns, "owned")
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	create(t, owner)
	owned.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}})
	apply(owned, engine.FieldOwner)
	apply(legacyDestinationRule(ns, "mine"), engine.FieldOwner)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := events.NewFakeRecorder(10)
	for _, c := range []struct {
		operator string
		deleted  bool
	}{{"unlabelled", false}, {"copycat", false}, {"owned", false}, {"mine", true}, {"absent", false}} {
		if err := engine.RemoveLegacyDestinationRule(ctx, env.Client, ns, c.operator, log, rec); err != nil {
			t.Fatalf("%s: %v", c.operator, err)
		}
		_, ok := object(t, engine.DestinationRuleGVK, ns, engine.LegacyDestinationRuleName(c.operator))
		if c.operator == "absent" {
			continue
		}
		if ok == c.deleted {
			t.Errorf("DestinationRule %s: present %v after the cleanup, want deleted %v", engine.LegacyDestinationRuleName(c.operator), ok, c.deleted)
		}
	}
	if n := len(rec.Events); n != 1 {
		t.Errorf("%d events, want one for the one rule deleted", n)
	}
}
