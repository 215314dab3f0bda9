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

// Build implements core.ContextBuilder.
func (Builder) Build(obj *unstructured.Unstructured, req *core.Request) (*core.EvalContext, error) {
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

	env := generic(obj, req, podMeta)
	env["spec"] = specSugar(podSpec)
	env["securityContext"] = podSecurityContextSugar(mapAt(podSpec, "securityContext"))
	env["pod"] = map[string]any{"metadata": podMeta, "spec": podSpec}
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
			containers = append(containers, core.Container{Name: name, Type: l.typ.(string), Sugar: containerSugar(cm, l.typ)})
		}
	}
	return &core.EvalContext{Env: env, Containers: containers}, nil
}

// GenericNames lists the names Generic binds.
func GenericNames() []string { return []string{"object", "metadata", "request"} }

// Generic returns the environment every object gets: object, metadata and
// request.
func Generic(obj *unstructured.Unstructured, req *core.Request) core.Env {
	return generic(obj, req, mapAt(obj.Object, "metadata"))
}

// generic is Generic with the labels and annotations of meta: a template's
// for pod-shaped kinds.
func generic(obj *unstructured.Unstructured, req *core.Request, meta map[string]any) core.Env {
	return core.Env{
		"object":   obj.Object,
		"metadata": metadataSugar(obj, meta),
		"request":  requestEnv(req),
	}
}

func requestEnv(req *core.Request) map[string]any {
	if req == nil {
		return map[string]any{"operation": "", "userInfo": map[string]any{}, "dryRun": false, "oldObject": nil}
	}
	return map[string]any{
		"operation": req.Operation,
		"userInfo":  orEmpty(req.UserInfo),
		"dryRun":    req.DryRun,
		"oldObject": req.OldObject,
	}
}

// metadataSugar describes the pod: for templates, the template's labels and
// annotations with the owning object's name and namespace.
func metadataSugar(obj *unstructured.Unstructured, podMeta map[string]any) map[string]any {
	return map[string]any{
		"name":        obj.GetName(),
		"namespace":   obj.GetNamespace(),
		"labels":      orEmpty(mapAt(podMeta, "labels")),
		"annotations": orEmpty(mapAt(podMeta, "annotations")),
	}
}

func specSugar(spec map[string]any) map[string]any {
	return map[string]any{
		"hostPID":                      spec["hostPID"],
		"hostNetwork":                  spec["hostNetwork"],
		"hostIPC":                      spec["hostIPC"],
		"serviceAccountName":           spec["serviceAccountName"],
		"automountServiceAccountToken": spec["automountServiceAccountToken"],
	}
}

func podSecurityContextSugar(sc map[string]any) map[string]any {
	return map[string]any{
		"runAsUser":          sc["runAsUser"],
		"runAsGroup":         sc["runAsGroup"],
		"runAsNonRoot":       sc["runAsNonRoot"],
		"fsGroup":            sc["fsGroup"],
		"supplementalGroups": orEmptyList(sc["supplementalGroups"]),
		"seccompProfileType": mapAt(sc, "seccompProfile")["type"],
	}
}

func containerSugar(c map[string]any, typ any) map[string]any {
	img, _ := c["image"].(string)
	sc := mapAt(c, "securityContext")
	caps := mapAt(sc, "capabilities")
	return map[string]any{
		"name":          c["name"],
		"containerType": typ,
		"image":         image.Parse(img).Map(),
		"command":       orEmptyList(c["command"]),
		"args":          orEmptyList(c["args"]),
		"ports":         orEmptyList(c["ports"]),
		"securityContext": map[string]any{
			"privileged":               sc["privileged"],
			"allowPrivilegeEscalation": sc["allowPrivilegeEscalation"],
			"readOnlyRootFilesystem":   sc["readOnlyRootFilesystem"],
			"runAsUser":                sc["runAsUser"],
			"runAsGroup":               sc["runAsGroup"],
			"runAsNonRoot":             sc["runAsNonRoot"],
			"procMount":                sc["procMount"],
			"seccompProfileType":       mapAt(sc, "seccompProfile")["type"],
			"capabilities": map[string]any{
				"add":  orEmptyList(caps["add"]),
				"drop": orEmptyList(caps["drop"]),
			},
		},
		"raw": c,
	}
}

// mapAt returns m[key] as a map, or nil. Reading a nil map is safe in Go, so
// callers chain it without checks.
func mapAt(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

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
