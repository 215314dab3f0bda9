package migrate

import "strings"

// kind is what the migrator knows statically about a value. SpEL methods such
// as contains() mean different things on lists and strings, and the Elvis
// operator treats empty strings as null, so some translations depend on it.
type kind int

const (
	kUnknown kind = iota
	kString
	kNumber
	kBool
	kList
	kMap
	kNull
)

func (k kind) String() string {
	return [...]string{"a value of unknown type", "a string", "a number", "a boolean", "a list", "a map", "null"}[k]
}

// Names are the top-level names a rule may read: the POC's context names,
// which Portal keeps (see internal/context/pod).
var Names = []string{"container", "spec", "securityContext", "metadata", "object", "pod", "request"}

// sugarKinds types the pod sugar Portal builds (internal/context/pod). Paths
// not listed (object.*, pod.*, container.raw.*) are of unknown type.
var sugarKinds = map[string]kind{
	"container":                                          kMap,
	"container.name":                                     kString,
	"container.containerType":                            kString,
	"container.image":                                    kMap,
	"container.image.registry":                           kString,
	"container.image.name":                               kString,
	"container.image.tag":                                kString,
	"container.image.sha256":                             kString,
	"container.image.reference":                          kString,
	"container.command":                                  kList,
	"container.args":                                     kList,
	"container.ports":                                    kList,
	"container.securityContext":                          kMap,
	"container.securityContext.privileged":               kBool,
	"container.securityContext.allowPrivilegeEscalation": kBool,
	"container.securityContext.readOnlyRootFilesystem":   kBool,
	"container.securityContext.runAsUser":                kNumber,
	"container.securityContext.runAsGroup":               kNumber,
	"container.securityContext.runAsNonRoot":             kBool,
	"container.securityContext.procMount":                kString,
	"container.securityContext.seccompProfileType":       kString,
	"container.securityContext.capabilities":             kMap,
	"container.securityContext.capabilities.add":         kList,
	"container.securityContext.capabilities.drop":        kList,
	"container.raw":                                      kMap,
	"spec":                                               kMap,
	"spec.hostPID":                                       kBool,
	"spec.hostNetwork":                                   kBool,
	"spec.hostIPC":                                       kBool,
	"spec.serviceAccountName":                            kString,
	"spec.automountServiceAccountToken":                  kBool,
	"securityContext":                                    kMap,
	"securityContext.runAsUser":                          kNumber,
	"securityContext.runAsGroup":                         kNumber,
	"securityContext.runAsNonRoot":                       kBool,
	"securityContext.fsGroup":                            kNumber,
	"securityContext.supplementalGroups":                 kList,
	"securityContext.seccompProfileType":                 kString,
	"metadata":                                           kMap,
	"metadata.name":                                      kString,
	"metadata.namespace":                                 kString,
	"metadata.labels":                                    kMap,
	"metadata.annotations":                               kMap,
	"metadata.labels.*":                                  kString,
	"metadata.annotations.*":                             kString,
	"object":                                             kMap,
	"pod":                                                kMap,
	"request":                                            kMap,
}

// sugarPath returns the dotted path of a chain of properties (and string
// indexes) from a root name, or "" when n is not such a chain.
func sugarPath(n Node) string {
	switch n := n.(type) {
	case *Ident:
		return n.Name
	case *Property:
		if base := sugarPath(n.X); base != "" {
			return base + "." + n.Name
		}
	case *Index:
		if lit, ok := n.Index.(*Literal); ok {
			if s, ok := lit.Value.(string); ok && !strings.Contains(s, ".") {
				if base := sugarPath(n.X); base != "" {
					return base + "." + s
				}
			}
		}
	}
	return ""
}

// kindOf infers the kind of n.
func kindOf(n Node) kind {
	switch n := n.(type) {
	case *Literal:
		return literalKind(n.Value)
	case *List:
		return kList
	case *Unary:
		return kBool
	case *Binary:
		return kBool
	case *Call:
		switch n.Method {
		case "size", "length":
			return kNumber
		case "toLowerCase", "toUpperCase":
			return kString
		}
		return kBool
	case *Elvis:
		return sameKind(kindOf(n.L), kindOf(n.R))
	case *Ternary:
		return sameKind(kindOf(n.Then), kindOf(n.Else))
	case *Index:
		// metadata.labels['app.kubernetes.io/name']: any key of a typed map.
		if lit, ok := n.Index.(*Literal); ok {
			if _, isStr := lit.Value.(string); isStr {
				if k, ok := sugarKinds[sugarPath(n.X)+".*"]; ok {
					return k
				}
			}
		}
		return pathKind(sugarPath(n))
	case *Ident, *Property:
		return pathKind(sugarPath(n))
	}
	return kUnknown
}

func pathKind(path string) kind {
	if path == "" {
		return kUnknown
	}
	if k, ok := sugarKinds[path]; ok {
		return k
	}
	// metadata.labels.<key>: the last segment is any key of a string map.
	if i := strings.LastIndex(path, "."); i > 0 {
		if k, ok := sugarKinds[path[:i]+".*"]; ok {
			return k
		}
	}
	return kUnknown
}

func literalKind(v any) kind {
	switch v.(type) {
	case string:
		return kString
	case int64, float64:
		return kNumber
	case bool:
		return kBool
	case nil:
		return kNull
	}
	return kUnknown
}

func sameKind(a, b kind) kind {
	switch {
	case a == b:
		return a
	case a == kNull:
		return b
	case b == kNull:
		return a
	}
	return kUnknown
}
