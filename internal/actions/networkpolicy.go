package actions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func init() {
	Register("patch-networkpolicy", func(env Env) Action { return &quarantine{env: env} })
}

// Quarantine names.
const (
	// QuarantineLabel marks a quarantined Pod; the quarantine policy
	// selects it, so only this pod is cut off, not its siblings.
	QuarantineLabel = "portal.io/quarantine"
	// QuarantineFieldManager owns the quarantine policies and labels.
	QuarantineFieldManager = "portal"
)

// quarantine applies a NetworkPolicy that denies all ingress and egress of
// the object's pods: a Pod (selected by a label Portal sets on it) or a
// workload (selected by its own spec.selector). It deletes the policy when
// the finding clears, unless keep.
type quarantine struct{ env Env }

func (*quarantine) Destructive() bool { return true }

// QuarantineName is the quarantine policy's name for an object.
func QuarantineName(kind, name string) string {
	h := sha256.Sum256([]byte(kind + "/" + name))
	return "portal-quarantine-" + hex.EncodeToString(h[:6])
}

func (q *quarantine) Apply(ctx context.Context, req *Request) (Outcome, error) {
	obj := req.Object
	if obj.Namespace == "" {
		return outcome(ResultSkipped, "patch-networkpolicy acts on namespaced workloads, not %s", obj.Kind), nil
	}
	name := QuarantineName(obj.Kind, obj.Name)
	var sel *metav1.LabelSelector
	if obj.Kind == "Pod" && obj.APIVersion == "v1" {
		if o, err := q.labelPod(ctx, req, name); err != nil || o.Result != "" {
			return o, err
		}
		sel = &metav1.LabelSelector{MatchLabels: map[string]string{QuarantineLabel: name}}
	} else {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(obj.APIVersion)
		u.SetKind(obj.Kind)
		if err := q.env.Reader.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: obj.Name}, u); err != nil {
			if apierrors.IsNotFound(err) {
				return gone(req), nil
			}
			return Outcome{}, fmt.Errorf("get %s: %w", target(obj), err)
		}
		if o, ok := req.reviewed(u.GetUID()); !ok {
			return o, nil
		}
		raw, found, _ := unstructured.NestedMap(u.Object, "spec", "selector")
		if !found {
			return outcome(ResultSkipped, "%s has no spec.selector to quarantine by", target(obj)), nil
		}
		sel = &metav1.LabelSelector{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, sel); err != nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
			return outcome(ResultSkipped, "%s has no usable spec.selector to quarantine by", target(obj)), nil
		}
	}
	np := networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: obj.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "portal"},
			Annotations: map[string]string{"portal.io/quarantine-of": obj.Kind + "/" + obj.Name, "portal.io/rule": req.Rule.Source.String()}},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}},
	}
	patch, err := json.Marshal(np)
	if err != nil {
		return Outcome{}, err
	}
	if err := q.env.Client.Patch(ctx, &np, client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner(QuarantineFieldManager), client.ForceOwnership); err != nil {
		return Outcome{}, fmt.Errorf("apply NetworkPolicy %s/%s: %w", obj.Namespace, name, err)
	}
	return outcome(ResultSuccess, "quarantined %s with NetworkPolicy %s (no ingress, no egress)", target(obj), name), nil
}

// labelPod marks the pod for the quarantine policy (value ""
// removes the mark). A non-empty Outcome says why nothing was done: the pod
// is gone, or is not the one an admission verdict reviewed.
func (q *quarantine) labelPod(ctx context.Context, req *Request, value string) (Outcome, error) {
	var labels map[string]any
	if value != "" {
		labels = map[string]any{QuarantineLabel: value}
	}
	return applyMetadata(ctx, q.env, req, "v1", "Pod", "labels", labels, QuarantineFieldManager+"-quarantine")
}

func (q *quarantine) Revert(ctx context.Context, req *Request) (Outcome, error) {
	obj := req.Object
	name := QuarantineName(obj.Kind, obj.Name)
	if obj.Kind == "Pod" {
		// A gone pod has no label to remove; the policy still goes.
		if _, err := q.labelPod(ctx, req, ""); err != nil {
			return Outcome{}, fmt.Errorf("unlabel %s: %w", target(obj), err)
		}
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: obj.Namespace}}
	if err := q.env.Client.Delete(ctx, np); err != nil && !apierrors.IsNotFound(err) {
		return Outcome{}, fmt.Errorf("delete NetworkPolicy %s/%s: %w", obj.Namespace, name, err)
	}
	return outcome(ResultSuccess, "lifted the quarantine of %s (deleted NetworkPolicy %s)", target(obj), name), nil
}

func (*quarantine) Permissions() []authorizationv1.ResourceAttributes {
	return []authorizationv1.ResourceAttributes{
		{Verb: "patch", Group: "networking.k8s.io", Resource: "networkpolicies"},
		{Verb: "create", Group: "networking.k8s.io", Resource: "networkpolicies"},
		{Verb: "delete", Group: "networking.k8s.io", Resource: "networkpolicies"},
		{Verb: "get", Resource: "pods"}, {Verb: "patch", Resource: "pods"},
	}
}
