package actions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func init() {
	Register("label", func(env Env) Action { return &metaAction{env: env, field: "labels"} })
	Register("annotate", func(env Env) Action { return &metaAction{env: env, field: "annotations"} })
}

// metaAction sets one label or annotation by server-side apply and removes
// it when the finding clears. Each rule and key has its own field manager
// ("portal-" and a hash), so two rules setting the same key share it, and
// one clearing leaves the other's in place.
type metaAction struct {
	env   Env
	field string
}

// FieldManager is the server-side apply field manager of one rule's key.
func FieldManager(req *Request) string {
	h := sha256.Sum256([]byte(req.Rule.Source.Kind + "\x00" + req.Rule.Namespace + "\x00" + req.Rule.Name + "\x00" + req.Spec.Type + "\x00" + req.Param("key")))
	return "portal-" + hex.EncodeToString(h[:8])
}

func (m *metaAction) Apply(ctx context.Context, req *Request) (Outcome, error) {
	if o, err := m.apply(ctx, req, map[string]any{req.Param("key"): req.Param("value")}); err != nil || o.Result != "" {
		return o, err
	}
	return outcome(ResultSuccess, "set %s %s=%s on %s", strings.TrimSuffix(m.field, "s"), req.Param("key"), req.Param("value"), target(req.Object)), nil
}

func (m *metaAction) Revert(ctx context.Context, req *Request) (Outcome, error) {
	if o, err := m.apply(ctx, req, nil); err != nil || o.Result != "" {
		return o, err
	}
	return outcome(ResultSuccess, "removed %s %s from %s", strings.TrimSuffix(m.field, "s"), req.Param("key"), target(req.Object)), nil
}

// apply applies the key (or, with none, gives it up, which removes it
// unless another manager holds it). A non-empty Outcome says why nothing
// was done: the object is gone, or is not the one an admission verdict
// reviewed.
func (m *metaAction) apply(ctx context.Context, req *Request, kv map[string]any) (Outcome, error) {
	return applyMetadata(ctx, m.env, req, req.Object.APIVersion, req.Object.Kind, m.field, kv, FieldManager(req))
}

// applyMetadata server-side applies metadata.<field> = kv (labels or
// annotations; nil drops what owner applied before) to the object of
// apiVersion and kind that req names, as field manager owner. It never
// creates the object. A non-empty Outcome says why nothing was done: the
// object is gone, or is not the one an admission verdict reviewed.
func applyMetadata(ctx context.Context, env Env, req *Request, apiVersion, kind, field string, kv map[string]any, owner string) (Outcome, error) {
	meta := map[string]any{"name": req.Object.Name}
	if req.Object.Namespace != "" {
		meta["namespace"] = req.Object.Namespace
	}
	if uid := req.reviewedUID(); uid != "" {
		// The API server refuses an apply whose metadata.uid is not the
		// stored object's, so an object replaced after the check below
		// is not changed either.
		meta["uid"] = uid
	}
	if kv != nil {
		meta[field] = kv
	}
	patch, err := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta})
	if err != nil {
		return Outcome{}, err
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(apiVersion)
	obj.SetKind(kind)
	obj.SetNamespace(req.Object.Namespace)
	obj.SetName(req.Object.Name)
	// Apply would create a missing object: check first, and never create.
	live := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}
	if err := env.Reader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return gone(req), nil
		}
		return Outcome{}, fmt.Errorf("get %s: %w", target(req.Object), err)
	}
	if o, ok := req.reviewed(live.UID); !ok {
		return o, nil
	}
	err = env.Client.Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner(owner), client.ForceOwnership)
	switch {
	case err == nil:
		return Outcome{}, nil
	case apierrors.IsNotFound(err):
		return gone(req), nil
	case req.reviewedUID() != "" && uidRefused(err):
		return replaced(req), nil
	}
	return Outcome{}, fmt.Errorf("apply %s: %w", target(req.Object), err)
}

func (m *metaAction) Permissions() []authorizationv1.ResourceAttributes {
	return []authorizationv1.ResourceAttributes{{Verb: "patch", Resource: "pods"}, {Verb: "get", Resource: "pods"}}
}
