package actions

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func init() { Register("revoke-sa-token", func(env Env) Action { return &revokeToken{env: env} }) }

// revokeToken revokes the credentials of the ServiceAccount of a Pod (or of
// a ServiceAccount itself). It deletes the legacy token Secrets
// (kubernetes.io/service-account-token) of the account. Bound tokens
// (TokenRequest, projected volumes) cannot be revoked one by one: they are
// valid until they expire as long as the account with their UID exists.
// With recreateServiceAccount the account is deleted and created again
// under its name, so it gets a new UID and every bound token issued before
// is rejected. Only in the target's own namespace.
type revokeToken struct{ env Env }

func (*revokeToken) Destructive() bool { return true }

func (a *revokeToken) Apply(ctx context.Context, req *Request) (Outcome, error) {
	obj := req.Object
	ns, sa := obj.Namespace, ""
	switch {
	case obj.Kind == "Pod" && obj.APIVersion == "v1":
		pod := &corev1.Pod{}
		if err := a.env.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: obj.Name}, pod); err != nil {
			if apierrors.IsNotFound(err) {
				return gone(req), nil
			}
			return Outcome{}, fmt.Errorf("get pod: %w", err)
		}
		if o, ok := req.reviewed(pod.UID); !ok {
			return o, nil
		}
		sa = pod.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
	case obj.Kind == "ServiceAccount" && obj.APIVersion == "v1":
		sa = obj.Name
		if req.reviewedUID() != "" {
			if o, ok, err := a.reviewedAccount(ctx, req); err != nil || !ok {
				return o, err
			}
		}
	default:
		return outcome(ResultSkipped, "revoke-sa-token acts on Pods and ServiceAccounts, not %s", obj.Kind), nil
	}
	secrets := &corev1.SecretList{}
	if err := a.env.Reader.List(ctx, secrets, client.InNamespace(ns), client.MatchingFields{"type": string(corev1.SecretTypeServiceAccountToken)}); err != nil {
		return Outcome{}, fmt.Errorf("list token Secrets in %s: %w", ns, err)
	}
	var deleted []string
	for i := range secrets.Items {
		s := &secrets.Items[i]
		// The namespace is the list's; checked again so nothing outside
		// the target's namespace is ever deleted.
		if s.Namespace != ns || s.Type != corev1.SecretTypeServiceAccountToken || s.Annotations[corev1.ServiceAccountNameKey] != sa {
			continue
		}
		if err := a.env.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
			return Outcome{}, fmt.Errorf("delete token Secret %s/%s: %w", ns, s.Name, err)
		}
		deleted = append(deleted, s.Name)
	}
	detail := fmt.Sprintf("no legacy token Secret of ServiceAccount %s/%s to delete", ns, sa)
	if len(deleted) > 0 {
		detail = fmt.Sprintf("deleted %d legacy token Secrets of ServiceAccount %s/%s: %s", len(deleted), ns, sa, strings.Join(deleted, ", "))
	}
	if req.Param("recreateServiceAccount") == "true" {
		uid, err := a.recreate(ctx, ns, sa)
		if err != nil {
			return Outcome{}, err
		}
		detail += "; recreated it with UID " + uid + ": every bound token issued before is rejected"
	}
	return Outcome{Result: ResultSuccess, Detail: detail}, nil
}

// reviewedAccount checks that the ServiceAccount an admission verdict
// names is the live one; a Pod's account needs no check, its pod was.
func (a *revokeToken) reviewedAccount(ctx context.Context, req *Request) (Outcome, bool, error) {
	live := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}}
	if err := a.env.Reader.Get(ctx, client.ObjectKey{Namespace: req.Object.Namespace, Name: req.Object.Name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return gone(req), false, nil
		}
		return Outcome{}, false, fmt.Errorf("get ServiceAccount %s/%s: %w", req.Object.Namespace, req.Object.Name, err)
	}
	o, ok := req.reviewed(live.UID)
	return o, ok, nil
}

// recreate deletes the ServiceAccount and creates it again with the same
// name, labels, annotations and settings: a new UID.
func (a *revokeToken) recreate(ctx context.Context, ns, name string) (string, error) {
	old := &corev1.ServiceAccount{}
	if err := a.env.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, old); err != nil {
		return "", fmt.Errorf("get ServiceAccount %s/%s: %w", ns, name, err)
	}
	if err := a.env.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("delete ServiceAccount %s/%s: %w", ns, name, err)
	}
	fresh := &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: name, Namespace: ns, Labels: old.Labels, Annotations: old.Annotations},
		ImagePullSecrets:             old.ImagePullSecrets,
		AutomountServiceAccountToken: old.AutomountServiceAccountToken,
	}
	if err := a.env.Client.Create(ctx, fresh); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// The ServiceAccount controller recreated "default" first.
			if err := a.env.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, fresh); err == nil && fresh.UID != old.UID {
				return string(fresh.UID), nil
			}
		}
		return "", fmt.Errorf("recreate ServiceAccount %s/%s (it is deleted now; create it again): %w", ns, name, err)
	}
	return string(fresh.UID), nil
}

// Permissions are what every use of the action needs (a ServiceAccount
// named by an admission verdict is read to compare its UID). Deleting and
// creating ServiceAccounts is needed only by rules that set
// recreateServiceAccount, and granted apart (Helm
// actions.revokeToken.recreateServiceAccounts): without it such an
// attempt fails and says which permission is missing.
func (*revokeToken) Permissions() []authorizationv1.ResourceAttributes {
	return []authorizationv1.ResourceAttributes{
		{Verb: "list", Resource: "secrets"}, {Verb: "delete", Resource: "secrets"},
		{Verb: "get", Resource: "pods"}, {Verb: "get", Resource: "serviceaccounts"},
	}
}
