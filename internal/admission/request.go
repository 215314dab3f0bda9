package admission

import (
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/manifest"
)

// subject returns the object a request is about: request.object, or
// request.oldObject for DELETE (which has no new object). It returns nil when
// the request carries neither (CONNECT, or a DELETE from an API server that
// does not send the old object): there is nothing to evaluate.
func subject(req *admission.Request) (*unstructured.Unstructured, error) {
	raw := req.Object.Raw
	field := "object"
	if req.Operation == admissionv1.Delete || len(raw) == 0 {
		raw, field = req.OldObject.Raw, "oldObject"
	}
	if len(raw) == 0 {
		return nil, nil
	}
	m, err := decodeMap(raw)
	if err != nil {
		return nil, fmt.Errorf("decode request.%s: %w", field, err)
	}
	obj := &unstructured.Unstructured{Object: m}
	// The API server always sends apiVersion and kind; fill them from the
	// request if a caller did not, since rules are indexed by kind.
	if obj.GetKind() == "" {
		obj.SetAPIVersion(groupVersion(req.Kind.Group, req.Kind.Version))
		obj.SetKind(req.Kind.Kind)
	}
	return obj, nil
}

// reviewedUID is the UID of the object a request is about: the API server
// sets metadata.uid before it calls validating webhooks on CREATE, and
// UPDATE and DELETE are about the stored object, whose UID oldObject
// carries where object lacks it. "" when neither has one.
func reviewedUID(obj *unstructured.Unstructured, creq *core.Request) string {
	if uid := obj.GetUID(); uid != "" {
		return string(uid)
	}
	if md, ok := creq.OldObject["metadata"].(map[string]any); ok {
		if uid, ok := md["uid"].(string); ok {
			return uid
		}
	}
	return ""
}

// coreRequest is the request.* a rule sees.
func coreRequest(req *admission.Request) (*core.Request, error) {
	out := &core.Request{
		Operation: string(req.Operation),
		UserInfo:  userInfo(req.UserInfo),
		DryRun:    req.DryRun != nil && *req.DryRun,
	}
	if len(req.OldObject.Raw) > 0 {
		m, err := decodeMap(req.OldObject.Raw)
		if err != nil {
			return nil, fmt.Errorf("decode request.oldObject: %w", err)
		}
		out.OldObject = m
	}
	return out, nil
}

// decodeMap decodes a JSON object the way unstructured objects are decoded
// everywhere else (whole numbers become int64), so a rule sees the same
// types at admission as in audit and in `portal eval`, and without
// metadata.managedFields, as in audit.
func decodeMap(raw []byte) (map[string]any, error) {
	m, err := manifest.DecodeJSON(withoutManagedFields(raw))
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}

// userInfo is request.userInfo: username, uid, groups and extra, with lists
// as []any so rules can use `in` and the collection builtins on them.
func userInfo(u authenticationv1.UserInfo) map[string]any {
	extra := make(map[string]any, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = anySlice(v)
	}
	return map[string]any{
		"username": u.Username,
		"uid":      u.UID,
		"groups":   anySlice(u.Groups),
		"extra":    extra,
	}
}

func anySlice[S ~[]E, E ~string](in S) []any {
	out := make([]any, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

func groupVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}
