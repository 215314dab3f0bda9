// Package kube holds what the API exposure controllers share: writing
// generated Istio objects with server-side apply, and reporting an object's
// state, condition and events in one place.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

// FieldOwner is the server-side apply field manager of every object the
// API exposure layer writes.
const FieldOwner = "portal"

// maxMessage bounds status descriptions and condition messages.
const maxMessage = 4096

// ErrNameTaken is returned by Apply when an object of the generated name
// exists and is not controlled by the owner.
var ErrNameTaken = errors.New("name taken")

// ToUnstructured turns a typed object into its API form. Istio's specs are
// protobuf messages whose JSON form only their own MarshalJSON knows, so it
// goes through encoding/json rather than the unstructured converter.
func ToUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("decode %T: %w", obj, err)
	}
	return u, nil
}

// Apply writes obj (typed, with apiVersion and kind set) with server-side
// apply, controlled by owner. An existing object of the same name that
// owner does not control is left alone: Portal never takes over what a user
// or another object wrote.
func Apply(ctx context.Context, c client.Client, scheme *runtime.Scheme, owner, obj client.Object) error {
	if owner != nil {
		if err := controllerutil.SetControllerReference(owner, obj, scheme); err != nil {
			return fmt.Errorf("owner reference: %w", err)
		}
	}
	u, err := ToUnstructured(obj)
	if err != nil {
		return err
	}
	u.SetCreationTimestamp(metav1.Time{})
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(u.GroupVersionKind())
	switch err := c.Get(ctx, client.ObjectKeyFromObject(u), existing); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read %s %s: %w", u.GetKind(), u.GetName(), err)
	case owner != nil && !metav1.IsControlledBy(existing, owner):
		return fmt.Errorf("%w: %s %s/%s exists and is not %s's; delete or rename it", ErrNameTaken, u.GetKind(), u.GetNamespace(), u.GetName(), owner.GetName())
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// Result is what a reconcile found, for the object's status.
type Result struct {
	State   gatewayv1alpha1.State
	Reason  string
	Message string
}

// Reporter writes an object's status and records an event when its state
// or reason changes.
type Reporter struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Action names what the controller did, for events ("Apply").
	Action string
}

// Report sets st from r and writes obj's status, an event when the state or
// reason changed. obj must be the object st belongs to, as read.
func (rp *Reporter) Report(ctx context.Context, obj client.Object, st *gatewayv1alpha1.Status, r Result) error {
	if len(r.Message) > maxMessage {
		r.Message = r.Message[:maxMessage]
	}
	prev := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady)
	changed := st.State != r.State || st.Description != r.Message || prev == nil || prev.Reason != r.Reason || prev.ObservedGeneration != obj.GetGeneration()
	if !changed {
		return nil
	}
	notify := st.State != r.State || prev == nil || prev.Reason != r.Reason
	orig, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copy %T", obj)
	}
	now := metav1.NewTime(time.Now())
	st.State, st.Description, st.LastProcessedTime = r.State, r.Message, &now
	status := metav1.ConditionFalse
	if r.State == gatewayv1alpha1.StateReady {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: gatewayv1alpha1.ConditionReady, Status: status, Reason: r.Reason,
		Message: r.Message, ObservedGeneration: obj.GetGeneration(),
	})
	if err := rp.Client.Status().Patch(ctx, obj, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("write status: %w", client.IgnoreNotFound(err))
	}
	if notify && rp.Recorder != nil {
		typ := corev1.EventTypeNormal
		if r.State == gatewayv1alpha1.StateError || r.State == gatewayv1alpha1.StateWarning {
			typ = corev1.EventTypeWarning
		}
		rp.Recorder.Eventf(obj, nil, typ, r.Reason, rp.Action, "%s", r.Message)
	}
	return nil
}

// DeleteLabelled deletes the objects of each list's kind in namespace with
// the given labels, except those named in keep.
func DeleteLabelled(ctx context.Context, c client.Client, namespace string, labels map[string]string, keep map[string]bool, lists ...client.ObjectList) error {
	var errs []error
	for _, l := range lists {
		if err := c.List(ctx, l, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
			errs = append(errs, err)
			continue
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, it := range items {
			o, ok := it.(client.Object)
			if !ok || keep[o.GetName()] {
				continue
			}
			if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// HasSidecar reports whether a pod runs Istio's proxy, as a container or a
// native sidecar (an init container that keeps running).
func HasSidecar(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == "istio-proxy" {
			return true
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == "istio-proxy" && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return true
		}
	}
	return false
}
