package policyreport

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeOwner returns the owner reference that ties a writer's reports to the
// Node named name, read through r (mgr.GetAPIReader(): the cache does not
// watch Nodes, and the writer needs only this one read, at start).
//
// The reference sets neither controller nor blockOwnerDeletion. Nothing
// controls a report but its writer, so no controller is claimed; and
// blockOwnerDeletion would only hold back a foreground deletion of the Node
// until its reports are gone, while setting it needs the right to update
// nodes/finalizers (the OwnerReferencesPermissionEnforcement admission
// plugin), a write on Nodes Portal has no use for. The garbage collector
// deletes dependents whose owner is gone either way.
func NodeOwner(ctx context.Context, r client.Reader, name string) (metav1.OwnerReference, error) {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := r.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("read Node %q: %w", name, err)
	}
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.GetName(), UID: node.GetUID()}, nil
}

// checkOwner refuses an owner reference the API server would refuse, before
// every report write fails on it.
func checkOwner(o metav1.OwnerReference) error {
	if o.APIVersion == "" || o.Kind == "" || o.Name == "" || o.UID == "" {
		return errors.New("an owner needs an apiVersion, kind, name and uid")
	}
	return nil
}
