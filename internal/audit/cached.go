package audit

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/cache"
)

// cachedObject is what an audit informer caches for one object: its JSON and
// the few metadata fields the informer, its keys and our event handlers read.
// An *unstructured.Unstructured pod costs ~18 KB of heap in nested maps; its
// JSON is a few KB, so at thousands of objects the cache shrinks several
// times. Evaluation decodes the JSON again, once per evaluation.
type cachedObject struct {
	// ObjectMeta holds only namespace, name, uid and resourceVersion: the
	// key functions, tombstones and sameVersion need no more, and rules read
	// the decoded object, not this.
	metav1.ObjectMeta
	typeMeta metav1.TypeMeta
	// raw is the object's JSON without metadata.managedFields. It is never
	// written after the transform, so copies share it.
	raw []byte
	// err, when set, is why raw could not be made; evaluate reports it.
	err error
}

var (
	_ runtime.Object = (*cachedObject)(nil)
	_ metav1.Object  = (*cachedObject)(nil)
)

// GetObjectKind implements runtime.Object.
func (o *cachedObject) GetObjectKind() schema.ObjectKind { return &o.typeMeta }

// DeepCopyObject implements runtime.Object. raw is shared, not copied: it
// is immutable, and copying it would defeat the point of caching it compact.
func (o *cachedObject) DeepCopyObject() runtime.Object {
	c := &cachedObject{typeMeta: o.typeMeta, raw: o.raw, err: o.err}
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// decode decodes the cached JSON into a new object, which the caller owns.
// It uses the decoder of unstructured.UnstructuredJSONScheme, which the
// dynamic client uses too, so every value comes back as it was cached:
// integers as int64, other numbers as float64 (see integralFloat).
func (o *cachedObject) decode() (*unstructured.Unstructured, error) {
	if o.err != nil {
		return nil, o.err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(o.raw, &m); err != nil {
		return nil, fmt.Errorf("decode cached %s %s: %w", o.typeMeta.Kind, o.key(), err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func (o *cachedObject) key() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// compact turns u into a cachedObject. It deletes u's managedFields: the
// informer hands the transform the object it just decoded, which nothing
// else holds (controller-runtime's TransformStripManagedFields does the
// same), and the cache keeps only the JSON.
func compact(u *unstructured.Unstructured) *cachedObject {
	c := &cachedObject{typeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}}
	c.Namespace, c.Name = u.GetNamespace(), u.GetName()
	c.UID, c.ResourceVersion = u.GetUID(), u.GetResourceVersion()
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	keepFloats(u.Object)
	// json.Marshal, not unstructured's MarshalJSON: the same encoding
	// without the trailing newline, and its result is sized to fit.
	raw, err := json.Marshal(u.Object)
	if err != nil {
		c.err = fmt.Errorf("encode %s %s for the audit cache: %w", c.typeMeta.Kind, c.key(), err)
		return c
	}
	c.raw = raw
	return c
}

// integralFloat is a float64 without a fraction. json.Marshal writes
// float64(3) as "3", which the decoder reads back as int64(3); rules can
// tell the two apart (type() says so, and % fails on a float), so it is written "3.0".
type integralFloat float64

func (f integralFloat) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(f), 'f', 1, 64), nil
}

// keepFloats replaces, in place, each float64 in v that json.Marshal would
// write as an integer with an integralFloat.
func keepFloats(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if f, ok := integral(e); ok {
				t[k] = f
			} else {
				keepFloats(e)
			}
		}
	case []any:
		for i, e := range t {
			if f, ok := integral(e); ok {
				t[i] = f
			} else {
				keepFloats(e)
			}
		}
	}
}

// integral reports whether v is a float64 without a fraction that
// json.Marshal writes as an integer: from 1e21 on it writes an exponent,
// which decodes as a float64 already.
func integral(v any) (integralFloat, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || math.Abs(f) >= 1e21 {
		return 0, false
	}
	return integralFloat(f), true
}

// compactTransform is the audit informers' transform: every listed or
// watched object is cached as a cachedObject. It never fails, since a
// transform error would abort a whole list: an object that cannot be encoded
// is logged here and cached with its error, which evaluate reports.
func compactTransform(log *slog.Logger, resource string) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *cachedObject:
			// A watch-list's initial objects go through the transform
			// in the reflector's temporary store and again when they
			// replace the FIFO's content.
			return o, nil
		case *unstructured.Unstructured:
			c := compact(o)
			if c.err != nil {
				log.Error("audit: object not cached compact; its evaluation will fail", "resource", resource, "error", c.err)
			}
			return c, nil
		default:
			// Tombstones and anything else the informer passes: left
			// alone (client-go does not transform tombstones).
			return obj, nil
		}
	}
}
