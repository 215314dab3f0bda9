package engine_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/engine"
)

// An Engine never deletes an object of its child name that another Engine
// controls: child names are derived from Engine names, so a tenant naming
// an Engine after another's child name must not tear the other's data
// plane down by having its own refused (here for a Gateway that does not
// exist) or deleted.
func TestTeardownLeavesAnotherEnginesObjects(t *testing.T) {
	cluster(t)
	ns := namespace(t, "owners")
	ruleSet(t, ns, "guard", guardRules)
	other := types.UID("0b4c1e2a-0000-4000-8000-00000000e001")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: engine.ChildName("squatter"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: wafv1alpha1.GroupVersion.String(), Kind: "Engine",
			Name: "victim", UID: other, Controller: ptrTo(true)}}}}
	create(t, sa)
	squatter := newEngine(ns, "squatter", "guard", "no-such-gateway", wafv1alpha1.DriverIstioWASM)
	create(t, squatter)
	waitFor(t, squatter, wafv1alpha1.ConditionAccepted, metav1.ConditionFalse, wafv1alpha1.ReasonTargetNotFound)
	if err := env.Client.Delete(context.Background(), squatter); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refused Engine deleted", func() bool {
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(squatter), squatter))
	})
	var got corev1.ServiceAccount
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(sa), &got); err != nil {
		t.Fatalf("the ServiceAccount another Engine controls was deleted by the Engine whose child name it has: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }
