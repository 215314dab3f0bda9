package exception

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/manifest"
)

// LoadPaths reads PortalException and PortalClusterException manifests
// from files and directories (portal eval --exceptions) and compiles them
// with eng, the way the cluster loader does. Every other kind is an error,
// so a rule file given by mistake is not silently ignored; so is a field
// the schema does not have, which the API server would refuse.
func LoadPaths(eng Engine, paths []string, stdin io.Reader) ([]*engine.Exception, []error) {
	docs, err := manifest.ReadPaths(paths, stdin)
	if err != nil {
		return nil, []error{err}
	}
	var (
		out  []*engine.Exception
		errs []error
	)
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			x, err := compileObject(eng, o)
			if err != nil {
				errs = append(errs, d.Errorf("%v", err))
				continue
			}
			out = append(out, x)
		}
	}
	return out, errs
}

func compileObject(eng Engine, o *unstructured.Unstructured) (*engine.Exception, error) {
	if gv := o.GroupVersionKind().GroupVersion(); gv != policyv1alpha1.GroupVersion {
		return nil, fmt.Errorf("%s %s is not an exception: want apiVersion %s, kind %s or %s", o.GetAPIVersion(), o.GetKind(), policyv1alpha1.GroupVersion, KindNamespaced, KindCluster)
	}
	var obj policyv1alpha1.ExceptionObject
	switch o.GetKind() {
	case KindNamespaced:
		if o.GetNamespace() == "" {
			return nil, fmt.Errorf("PortalException %s has no metadata.namespace: it applies only in its own namespace", o.GetName())
		}
		obj = &policyv1alpha1.PortalException{}
	case KindCluster:
		obj = &policyv1alpha1.PortalClusterException{}
	default:
		return nil, fmt.Errorf("kind %s is not an exception: want %s or %s", o.GetKind(), KindNamespaced, KindCluster)
	}
	data, err := json.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
	}
	x, err := FromSpec(obj.GetExceptionSpec(), o.GetKind(), obj.GetNamespace(), obj.GetName())
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return eng.CompileException(x)
}
