package event

import (
	"maps"
	"slices"
	"strings"

	"github.com/vilaca/portal/internal/core"
)

// Name is the top-level name rules read the event under.
const Name = "event"

// Env returns what a rule sees as event.*: who did what to which object,
// the classes the event is of, and target, the object the request was
// about as the cluster cache holds it (nil when there is none, it is not
// cached, or it is a Secret: a Secret's contents never reach a rule).
func Env(ev *Event, classes []string, target map[string]any) map[string]any {
	ref := ObjectRef{}
	if ev.ObjectRef != nil {
		ref = *ev.ObjectRef
	}
	status := Status{}
	if ev.ResponseStatus != nil {
		status = *ev.ResponseStatus
	}
	var impersonated any
	if ev.ImpersonatedUser != nil {
		impersonated = userEnv(ev.ImpersonatedUser)
	}
	return map[string]any{
		"classes":          slices.Clone(classes),
		"auditID":          ev.AuditID,
		"stage":            ev.Stage,
		"verb":             ev.Verb,
		"requestURI":       ev.RequestURI,
		"user":             userEnv(&ev.User),
		"impersonatedUser": impersonated,
		"sourceIPs":        anyList(ev.SourceIPs),
		"userAgent":        ev.UserAgent,
		"resource":         ref.Resource,
		"subresource":      ref.Subresource,
		"objectRef": map[string]any{
			"resource": ref.Resource, "subresource": ref.Subresource, "namespace": ref.Namespace, "name": ref.Name,
			"apiGroup": ref.APIGroup, "apiVersion": ref.APIVersion, "uid": ref.UID,
		},
		"responseStatus": map[string]any{"code": int(status.Code), "status": status.Status, "reason": status.Reason, "message": status.Message},
		"annotations":    stringMap(ev.Annotations),
		"target":         target,
		"falco":          falcoEnv(ev.Falco),
	}
}

// namespacedAnnotations is the prefix of the audit annotations a
// namespaced rule sees: Pod Security's verdicts on its namespace's pods.
const namespacedAnnotations = "pod-security.kubernetes.io/"

// NamespacedEnv returns env as a namespaced rule (PortalRule) sees it. The
// author of a namespace's rule may see who acted in the namespace, not what
// else is known of them: the user's and the impersonated user's groups, the
// client's addresses (X-Forwarded-For included, which any client writes)
// and the audit annotations other than Pod Security's (authorization
// decisions and reasons, which name the cluster's RBAC bindings) are left
// empty. env is not modified.
func NamespacedEnv(env map[string]any) map[string]any {
	out := maps.Clone(env)
	out["sourceIPs"] = []any{}
	for _, k := range []string{"user", "impersonatedUser"} {
		if u, ok := env[k].(map[string]any); ok {
			u = maps.Clone(u)
			u["groups"] = []any{}
			out[k] = u
		}
	}
	kept := map[string]any{}
	if ann, ok := env["annotations"].(map[string]any); ok {
		for k, v := range ann {
			if strings.HasPrefix(k, namespacedAnnotations) {
				kept[k] = v
			}
		}
	}
	out["annotations"] = kept
	return out
}

func userEnv(u *UserInfo) map[string]any {
	var sa any
	if ns, name, ok := u.ServiceAccount(); ok {
		sa = map[string]any{"namespace": ns, "name": name}
	}
	return map[string]any{"username": u.Username, "uid": u.UID, "groups": anyList(u.Groups), "serviceAccount": sa}
}

func falcoEnv(a *FalcoAlert) any {
	if a == nil {
		return nil
	}
	return map[string]any{
		"rule": a.Rule, "priority": a.Priority, "output": a.Output, "source": a.Source, "hostname": a.Hostname,
		"tags": anyList(a.Tags), "time": a.Time, "output_fields": a.OutputFields,
	}
}

func anyList(l []string) []any {
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Schema is the shape of event.*, so a misspelt field is a compile error.
func Schema() *core.Schema {
	leaf := func() *core.Schema { return &core.Schema{} }
	fields := func(names ...string) *core.Schema {
		s := &core.Schema{Fields: map[string]*core.Schema{}}
		for _, n := range names {
			s.Fields[n] = leaf()
		}
		return s
	}
	user := fields("username", "uid", "groups")
	user.Fields["serviceAccount"] = fields("namespace", "name")
	impersonated := fields("username", "uid", "groups")
	impersonated.Fields["serviceAccount"] = fields("namespace", "name")
	falco := fields("rule", "priority", "output", "source", "hostname", "tags", "time")
	falco.Fields["output_fields"] = &core.Schema{Open: true}
	ev := fields("classes", "auditID", "stage", "verb", "requestURI", "sourceIPs", "userAgent", "resource", "subresource")
	ev.Fields["user"] = user
	ev.Fields["impersonatedUser"] = impersonated
	ev.Fields["objectRef"] = fields("resource", "subresource", "namespace", "name", "apiGroup", "apiVersion", "uid")
	ev.Fields["responseStatus"] = fields("code", "status", "reason", "message")
	ev.Fields["annotations"] = &core.Schema{Open: true}
	ev.Fields["target"] = &core.Schema{Open: true}
	ev.Fields["falco"] = falco
	return ev
}
