// Package pod builds the rule environment for pod-shaped objects: Pods and
// every kind that carries a pod template. Besides the raw object it exposes a
// deliberately narrow sugar (container.*, spec.*, securityContext.*,
// metadata.*) covering the fields rule authors reach for most, and lists the
// containers the engine binds to `container` one at a time.
package pod

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/image"
)

// templatePaths says where each pod-shaped kind keeps its pod (metadata and
// spec). A Pod is its own pod.
var templatePaths = map[schema.GroupKind][]string{
	{Group: "", Kind: "Pod"}:                   nil,
	{Group: "", Kind: "PodTemplate"}:           {"template"},
	{Group: "", Kind: "ReplicationController"}: {"spec", "template"},
	{Group: "apps", Kind: "Deployment"}:        {"spec", "template"},
	{Group: "apps", Kind: "StatefulSet"}:       {"spec", "template"},
	{Group: "apps", Kind: "DaemonSet"}:         {"spec", "template"},
	{Group: "apps", Kind: "ReplicaSet"}:        {"spec", "template"},
	{Group: "batch", Kind: "Job"}:              {"spec", "template"},
	{Group: "batch", Kind: "CronJob"}:          {"spec", "jobTemplate", "spec", "template"},
}

// ContainerTypes in the order the engine visits them.
const (
	TypeContainer          = "container"
	TypeInitContainer      = "initContainer"
	TypeEphemeralContainer = "ephemeralContainer"
)

// containerLists names the lists of a pod spec that hold containers. typ is
// the type as the sugar's containerType, boxed once here rather than for
// every container.
var containerLists = [...]struct {
	field string
	typ   any
}{
	{"containers", TypeContainer},
	{"initContainers", TypeInitContainer},
	{"ephemeralContainers", TypeEphemeralContainer},
}

// Builder is the pod-shaped core.ContextBuilder.
type Builder struct{}

// Names lists the names Build binds beyond object, metadata and request,
// which only pod-shaped kinds have.
func (Builder) Names() []string { return []string{"container", "spec", "securityContext", "pod"} }

// Describe names the kinds the builder supports, for errors.
func (Builder) Describe() string { return "pod-shaped kinds" }

// Supports reports whether gvk is a Pod or carries a pod template.
func (Builder) Supports(gvk schema.GroupVersionKind) bool {
	_, ok := templatePaths[gvk.GroupKind()]
	return ok
}

// IsPodShaped is Supports for a group and kind, for callers without a version.
func IsPodShaped(gk schema.GroupKind) bool {
	_, ok := templatePaths[gk]
	return ok
}

// Build implements core.ContextBuilder. The maps it makes come from p:
// see Release.
func (Builder) Build(obj *unstructured.Unstructured, req *core.Request, p core.Maps) (*core.EvalContext, error) {
	path, ok := templatePaths[obj.GroupVersionKind().GroupKind()]
	if !ok {
		return nil, fmt.Errorf("%s is not pod-shaped", obj.GroupVersionKind().Kind)
	}
	podObj := obj.Object
	if path != nil {
		var found bool
		var err error
		podObj, found, err = unstructured.NestedMap(obj.Object, path...)
		if err != nil {
			return nil, fmt.Errorf("read pod template: %w", err)
		}
		if !found {
			podObj = map[string]any{}
		}
	}
	podMeta := mapAt(podObj, "metadata")
	podSpec := mapAt(podObj, "spec")

	env := generic(obj, req, podMeta, p)
	env["spec"] = specSugar(podSpec, p)
	env["securityContext"] = podSecurityContextSugar(mapAt(podSpec, "securityContext"), p)
	podMap := newMap(p, 2)
	podMap["metadata"], podMap["spec"] = podMeta, podSpec
	env["pod"] = podMap
	env["container"] = nil

	var lists [len(containerLists)][]any
	n := 0
	for i, l := range containerLists {
		lists[i], _ = podSpec[l.field].([]any)
		n += len(lists[i])
	}
	containers := make([]core.Container, 0, n)
	for i, l := range containerLists {
		for _, c := range lists[i] {
			cm, ok := c.(map[string]any)
			if !ok {
				continue
			}
			name, _ := cm["name"].(string)
			containers = append(containers, core.Container{Name: name, Type: l.typ.(string), Sugar: containerSugar(cm, l.typ, p)})
		}
	}
	return &core.EvalContext{Env: env, Containers: containers}, nil
}

// Release implements core.ContextBuilder: it hands back to p the maps
// Build made for ec, and none of the object's.
func (Builder) Release(ec *core.EvalContext, p core.Maps) {
	if p == nil {
		return
	}
	for _, c := range ec.Containers {
		sc := mapAt(c.Sugar, "securityContext")
		p.PutMap(mapAt(sc, "capabilities"))
		p.PutMap(sc)
		p.PutMap(mapAt(c.Sugar, "image"))
		p.PutMap(c.Sugar)
	}
	for _, name := range [...]string{"spec", "securityContext", "pod"} {
		p.PutMap(mapAt(ec.Env, name))
	}
	releaseGeneric(ec.Env, p)
}

// GenericNames lists the names Generic binds.
func GenericNames() []string { return []string{"object", "metadata", "request"} }

// Generic is the core.ContextBuilder of the kinds no other builder
// supports: it binds object, metadata and request.
type Generic struct{}

// Supports implements core.ContextBuilder: every kind.
func (Generic) Supports(schema.GroupVersionKind) bool { return true }

// Build implements core.ContextBuilder.
func (Generic) Build(obj *unstructured.Unstructured, req *core.Request, p core.Maps) (*core.EvalContext, error) {
	return &core.EvalContext{Env: generic(obj, req, mapAt(obj.Object, "metadata"), p)}, nil
}

// Release implements core.ContextBuilder.
func (Generic) Release(ec *core.EvalContext, p core.Maps) {
	if p != nil {
		releaseGeneric(ec.Env, p)
	}
}

// generic is the environment every object gets, with the labels and
// annotations of meta: a template's for pod-shaped kinds.
func generic(obj *unstructured.Unstructured, req *core.Request, meta map[string]any, p core.Maps) core.Env {
	env := newMap(p, 8) // object, metadata, request; spec, securityContext, pod, container
	env["object"] = obj.Object
	env["metadata"] = metadataSugar(obj, meta, p)
	env["request"] = requestEnv(req, p)
	return env
}

func releaseGeneric(env core.Env, p core.Maps) {
	p.PutMap(mapAt(env, "metadata"))
	p.PutMap(mapAt(env, "request"))
	p.PutMap(env)
}

func requestEnv(req *core.Request, p core.Maps) map[string]any {
	m := newMap(p, 4)
	if req == nil {
		m["operation"], m["userInfo"], m["dryRun"], m["oldObject"] = "", emptyMap, false, nil
		return m
	}
	m["operation"] = req.Operation
	m["userInfo"] = orEmpty(req.UserInfo)
	m["dryRun"] = req.DryRun
	m["oldObject"] = req.OldObject
	return m
}

// metadataSugar describes the pod: for templates, the template's labels and
// annotations with the owning object's name and namespace.
func metadataSugar(obj *unstructured.Unstructured, podMeta map[string]any, p core.Maps) map[string]any {
	m := newMap(p, 4)
	m["name"] = obj.GetName()
	m["namespace"] = obj.GetNamespace()
	m["labels"] = orEmpty(mapAt(podMeta, "labels"))
	m["annotations"] = orEmpty(mapAt(podMeta, "annotations"))
	return m
}

// The fields the sugar passes on as the object has them; the others it
// derives.
var (
	specFields               = []string{"hostPID", "hostNetwork", "hostIPC", "serviceAccountName", "automountServiceAccountToken"}
	podSecurityContextFields = []string{"runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup"}
	securityContextFields    = []string{"privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsUser", "runAsGroup", "runAsNonRoot", "procMount"}
)

// withFields sets each of fields in m to its value in src (nil when absent)
// and returns m.
func withFields(m, src map[string]any, fields []string) map[string]any {
	for _, f := range fields {
		m[f] = src[f]
	}
	return m
}

func specSugar(spec map[string]any, p core.Maps) map[string]any {
	return withFields(newMap(p, len(specFields)), spec, specFields)
}

func podSecurityContextSugar(sc map[string]any, p core.Maps) map[string]any {
	m := withFields(newMap(p, len(podSecurityContextFields)+2), sc, podSecurityContextFields)
	m["supplementalGroups"] = orEmptyList(sc["supplementalGroups"])
	m["seccompProfileType"] = mapAt(sc, "seccompProfile")["type"]
	return m
}

func containerSugar(c map[string]any, typ any, p core.Maps) map[string]any {
	img, _ := c["image"].(string)
	sc := mapAt(c, "securityContext")
	caps := mapAt(sc, "capabilities")
	capsSugar := newMap(p, 2)
	capsSugar["add"] = orEmptyList(caps["add"])
	capsSugar["drop"] = orEmptyList(caps["drop"])
	scSugar := withFields(newMap(p, len(securityContextFields)+2), sc, securityContextFields)
	scSugar["seccompProfileType"] = mapAt(sc, "seccompProfile")["type"]
	scSugar["capabilities"] = capsSugar
	m := newMap(p, 8)
	m["name"] = c["name"]
	m["containerType"] = typ
	m["image"] = image.Parse(img).Into(newMap(p, 5))
	m["command"] = orEmptyList(c["command"])
	m["args"] = orEmptyList(c["args"])
	m["ports"] = orEmptyList(c["ports"])
	m["securityContext"] = scSugar
	m["raw"] = c
	return m
}

// mapAt returns m[key] as a map, or nil. Reading a nil map is safe in Go, so
// callers chain it without checks.
// newMap is a map from p, or a new one without a p.
func newMap(p core.Maps, size int) map[string]any {
	if p == nil {
		return make(map[string]any, size)
	}
	return p.Map(size)
}

func mapAt(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return emptyMap
	}
	return m
}

// emptyMap is the value of an absent map (labels, annotations, userInfo),
// shared for the reason emptyList is.
var emptyMap = map[string]any{}

// emptyList is the value of an absent list. Boxing a slice allocates, so the
// sugar boxes this one once and passes a present list on in the interface
// it came in. Neither is changed: rules read them.
var emptyList any = []any{}

func orEmptyList(v any) any {
	if _, ok := v.([]any); ok {
		return v
	}
	return emptyList
}
