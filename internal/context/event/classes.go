package event

import (
	"slices"
)

// Class is a named class of runtime events a rule lists in
// runtime.events. Classes overlap: one event may be of several (every event
// is of "any").
type Class struct {
	Name string
	// Doc says which verbs, resources and subresources the class covers,
	// for the reference page and errors.
	Doc string
	// LongRunning classes are evaluated when the response starts (the
	// stream opens), not when it completes, which may be hours later.
	LongRunning bool
	match       func(ev *Event) bool
}

// Any is the class every event is of: rules that decide on the raw event.
const Any = "any"

// classes is the registry, filled at init and read-only after.
var classes []Class

func register(c Class) { classes = append(classes, c) }

func sub(ev *Event, group, resource string, subresources ...string) bool {
	r := ev.ObjectRef
	return r != nil && ev.Falco == nil && r.APIGroup == group && r.Resource == resource && slices.Contains(subresources, r.Subresource)
}

func init() {
	register(Class{Name: "exec", Doc: "create or get on pods/exec: a command run in a container (kubectl exec)", LongRunning: true,
		match: func(ev *Event) bool { return sub(ev, "", "pods", "exec") }})
	register(Class{Name: "attach", Doc: "create or get on pods/attach: a terminal attached to a running container (kubectl attach, kubectl run -it)", LongRunning: true,
		match: func(ev *Event) bool { return sub(ev, "", "pods", "attach") }})
	register(Class{Name: "port-forward", Doc: "create or get on pods/portforward: a port of a pod forwarded to the client (kubectl port-forward)", LongRunning: true,
		match: func(ev *Event) bool { return sub(ev, "", "pods", "portforward") }})
	register(Class{Name: "proxy", Doc: "any verb on pods/proxy, services/proxy or nodes/proxy: the API server proxying HTTP to a workload or kubelet", LongRunning: true,
		match: func(ev *Event) bool {
			return sub(ev, "", "pods", "proxy") || sub(ev, "", "services", "proxy") || sub(ev, "", "nodes", "proxy")
		}})
	register(Class{Name: "secret-read", Doc: "get, list or watch on secrets: who read which Secret (never what it holds)",
		match: func(ev *Event) bool {
			return sub(ev, "", "secrets", "") && slices.Contains([]string{"get", "list", "watch"}, ev.Verb)
		}})
	register(Class{Name: "secret-write", Doc: "create, update, patch, delete or deletecollection on secrets",
		match: func(ev *Event) bool {
			return sub(ev, "", "secrets", "") && slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, ev.Verb)
		}})
	register(Class{Name: "token-request", Doc: "create on serviceaccounts/token: a ServiceAccount token minted through the TokenRequest API (kubectl create token)",
		match: func(ev *Event) bool { return sub(ev, "", "serviceaccounts", "token") && ev.Verb == "create" }})
	register(Class{Name: "ephemeral-container", Doc: "update or patch on pods/ephemeralcontainers: a debug container added to a running pod (kubectl debug)",
		match: func(ev *Event) bool {
			return sub(ev, "", "pods", "ephemeralcontainers") && (ev.Verb == "update" || ev.Verb == "patch")
		}})
	register(Class{Name: "pod-delete", Doc: "delete or deletecollection on pods",
		match: func(ev *Event) bool {
			return sub(ev, "", "pods", "") && (ev.Verb == "delete" || ev.Verb == "deletecollection")
		}})
	register(Class{Name: "rbac-change", Doc: "create, update, patch, delete or deletecollection on roles, clusterroles, rolebindings or clusterrolebindings (rbac.authorization.k8s.io)",
		match: func(ev *Event) bool {
			return ev.ObjectRef != nil && ev.Falco == nil && ev.ObjectRef.APIGroup == "rbac.authorization.k8s.io" &&
				slices.Contains([]string{"roles", "clusterroles", "rolebindings", "clusterrolebindings"}, ev.ObjectRef.Resource) &&
				slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, ev.Verb)
		}})
	register(Class{Name: "impersonation", Doc: "any request made while impersonating another user (kubectl --as)",
		match: func(ev *Event) bool { return ev.ImpersonatedUser != nil }})
	register(Class{Name: "falco", Doc: "a Falco alert (Falco's http_output or Falcosidekick's webhook output) about a pod",
		match: func(ev *Event) bool { return ev.Falco != nil }})
	register(Class{Name: Any, Doc: "every event: rules that decide on the raw event",
		match: func(*Event) bool { return true }})
}

// Classes returns the registered classes, in registration order.
func Classes() []Class { return slices.Clone(classes) }

// Names returns the names of the registered classes.
func Names() []string {
	out := make([]string, len(classes))
	for i, c := range classes {
		out[i] = c.Name
	}
	return out
}

// Known reports whether name is a registered class.
func Known(name string) bool { return slices.Contains(Names(), name) }

// Classify returns the names of the classes ev is of; "any" always.
func Classify(ev *Event) []string {
	var out []string
	for i := range classes {
		if classes[i].match(ev) {
			out = append(out, classes[i].Name)
		}
	}
	return out
}

// longRunning reports whether ev is of a long-running class, or a watch.
func longRunning(ev *Event) bool {
	if ev.Verb == "watch" {
		return true
	}
	for i := range classes {
		if classes[i].LongRunning && classes[i].match(ev) {
			return true
		}
	}
	return false
}

// StageDecision says whether an audit event is the stage its request is
// evaluated at, so one request is one evaluation: ResponseStarted for
// long-running requests (exec, attach, port-forward, proxy, watch), whose
// ResponseComplete may come hours later; ResponseComplete for the others.
// A long-running request whose ResponseStarted stage the audit policy
// omits is evaluated at ResponseComplete: seenStarted says whether the
// caller already saw its ResponseStarted. RequestReceived and Panic are
// never evaluated; Falco alerts always are.
func StageDecision(ev *Event, seenStarted bool) bool {
	if ev.Falco != nil {
		return true
	}
	switch ev.Stage {
	case StageResponseStarted:
		return longRunning(ev)
	case StageResponseComplete:
		return !longRunning(ev) || !seenStarted
	}
	return false
}

// LongRunning reports whether ev's request is long-running, so its
// ResponseStarted is the stage evaluated.
func LongRunning(ev *Event) bool { return longRunning(ev) }
