package clustercache

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/cache"
)

// Object is what the cluster cache holds for one object: its JSON,
// deflated, and the few metadata fields the informer, its keys, label
// selectors and event handlers read. An *unstructured.Unstructured pod costs
// ~18 KB of heap in nested maps and its JSON ~3 KB; deflated against a
// dictionary of its kind it is a few hundred bytes at most, so at thousands
// of objects the cache shrinks many times. Readers decode it again (Decode),
// and own what they decode.
type Object struct {
	// ObjectMeta holds only namespace, name, uid and resourceVersion: the
	// key functions, tombstones and sameVersion need no more, and readers
	// read the decoded object, not this.
	metav1.ObjectMeta
	// labels are the object's labels as one string, key NUL value NUL ...,
	// sorted by key: label selectors match without decoding, for far less
	// heap than a map.
	labels flatLabels
	// bigLabels: the labels were too long to keep flat (maxFlatLabels), or
	// held a NUL; Labels decodes them from the deflated JSON.
	bigLabels bool
	typeMeta  metav1.TypeMeta
	// deflated is the object's JSON without metadata.managedFields,
	// compressed with dict. Neither is written after the transform, so
	// copies share them.
	deflated []byte
	dict     *dictionary
	// err, when set, is why deflated could not be made; evaluate reports it.
	err error
}

var (
	_ runtime.Object = (*Object)(nil)
	_ metav1.Object  = (*Object)(nil)
)

// GetObjectKind implements runtime.Object.
func (o *Object) GetObjectKind() schema.ObjectKind { return &o.typeMeta }

// DeepCopyObject implements runtime.Object. deflated is shared, not copied:
// it is immutable, and copying it would defeat the point of caching it
// compact.
func (o *Object) DeepCopyObject() runtime.Object {
	c := &Object{typeMeta: o.typeMeta, labels: o.labels, bigLabels: o.bigLabels, deflated: o.deflated, dict: o.dict, err: o.err}
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// Decode decodes the cached JSON into a new object, which the caller owns.
// An object that could not be cached compact (its JSON could not be encoded)
// returns why.
func (o *Object) Decode() (*unstructured.Unstructured, error) { return o.decode() }

// Labels are the object's labels, for a labels.Selector.
func (o *Object) Labels() labels.Labels {
	if !o.bigLabels {
		return o.labels
	}
	u, err := o.decode()
	if err != nil {
		return labels.Set{}
	}
	return labels.Set(u.GetLabels())
}

// labelsIn is Labels, through ref where the labels are flat (see
// labelsRef): valid until ref is set again.
func (o *Object) labelsIn(ref *labelsRef) labels.Labels {
	if o.bigLabels {
		return o.Labels()
	}
	ref.f = o.labels
	return ref
}

// SameLabels reports whether o and p carry the same labels, so a consumer
// that only reads labels (selector matching) can skip an update that
// changed none.
func (o *Object) SameLabels(p *Object) bool {
	if !o.bigLabels && !p.bigLabels {
		return o.labels == p.labels
	}
	return labels.Equals(labelMap(o.Labels()), labelMap(p.Labels()))
}

func labelMap(l labels.Labels) map[string]string {
	switch t := l.(type) {
	case flatLabels:
		return t.Map()
	case labels.Set:
		return t
	}
	return nil
}

// Key is the object's namespace and name.
func (o *Object) Key() Key { return Key{Namespace: o.Namespace, Name: o.Name} }

// Size is the heap the object's compact JSON holds, in bytes.
func (o *Object) Size() int { return len(o.deflated) }

// decode decodes the cached JSON into a new object, which the caller owns.
// It uses the decoder of unstructured.UnstructuredJSONScheme, which the
// dynamic client uses too, so every value comes back as it was cached:
// integers as int64, other numbers as float64 (see integralFloat).
func (o *Object) decode() (*unstructured.Unstructured, error) {
	if o.err != nil {
		return nil, o.err
	}
	d := decoders.Get().(*decoder)
	defer d.release()
	m, err := d.decode(o.deflated, o.dict.data)
	if err != nil {
		return nil, fmt.Errorf("decode cached %s %s: %w", o.typeMeta.Kind, o.key(), err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func (o *Object) key() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// compact turns u into a Object deflated with d, which it sets from u
// when it is still empty. It deletes u's managedFields: the informer hands
// the transform the object it just decoded, which nothing else holds
// (controller-runtime's TransformStripManagedFields does the same), and the
// cache keeps only the JSON.
func compact(u *unstructured.Unstructured, d *dictionary) *Object {
	c := &Object{typeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}, dict: d}
	c.Namespace, c.Name = u.GetNamespace(), u.GetName()
	c.UID, c.ResourceVersion = u.GetUID(), u.GetResourceVersion()
	var flat bool
	c.labels, flat = flattenLabels(u.GetLabels())
	if !flat || len(c.labels) > maxFlatLabels {
		// Anyone who may create an object chooses its labels: thousands
		// of them deflate to little but would be held in full here. (A
		// NUL, which no API server accepts, cannot be kept flat.)
		c.labels, c.bigLabels = "", true
	}
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	keepFloats(u.Object)
	e := encoders.Get().(*encoder)
	defer e.release()
	deflated, err := e.deflate(u.Object, d)
	if err != nil {
		c.err = fmt.Errorf("encode %s %s for the cluster cache: %w", c.typeMeta.Kind, c.key(), err)
		return c
	}
	c.deflated = deflated
	return c
}

// maxFlatLabels bounds the labels an Object keeps outside its deflated
// JSON. Real label sets are far shorter; longer ones are read from the JSON,
// which costs a decode per selector match but keeps the cache compact.
const maxFlatLabels = 2 << 10

// deflateLevel is the lowest level that uses a preset dictionary:
// flate.BestSpeed ignores one, and a pod deflated without it is three times
// the size and no faster to compact or decode. Higher levels save ~1% more
// in up to 40% more time (BenchmarkCachedPod).
const deflateLevel = 2

// maxDictionary is deflate's window: a longer dictionary would be held but
// never read.
const maxDictionary = 32 << 10

// dictionary is a preset deflate dictionary of one cached resource: the
// JSON of one of its objects, chosen by the chooser. Objects of one kind
// share most keys and many values, so against it a pod deflates to ~100
// bytes instead of ~1 KB. It is set once and never changed, as each object
// compressed with it needs the same bytes to be decompressed.
type dictionary struct {
	once sync.Once
	data []byte
	// writers holds *flate.Writer made with data: a writer's dictionary is
	// fixed when it is made (Reset keeps it), so each dictionary pools its
	// own.
	writers sync.Pool
}

// set makes json the dictionary unless it has one, and returns it.
func (d *dictionary) set(json []byte) []byte {
	d.once.Do(func() { d.data = bytes.Clone(json[:min(len(json), maxDictionary)]) })
	return d.data
}

// maxPooledBuffer bounds the scratch buffers kept for reuse, so that a rare
// huge object does not pin its size in every pool.
const maxPooledBuffer = 256 << 10

// encoder is the scratch space of one compaction; encoders pools them, as
// informers compact concurrently.
type encoder struct {
	json bytes.Buffer
	enc  *json.Encoder
	out  bytes.Buffer
}

var encoders = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = json.NewEncoder(&e.json)
	// Only our decoder reads this JSON: escaping <, > and & would only
	// make it longer.
	e.enc.SetEscapeHTML(false)
	return e
}}

func (e *encoder) release() {
	if e.json.Cap() <= maxPooledBuffer && e.out.Cap() <= maxPooledBuffer {
		encoders.Put(e)
	}
}

// deflate encodes v as JSON, sets d from it if d is empty, and returns it
// deflated with d, in a slice of its own sized to fit.
func (e *encoder) deflate(v any, d *dictionary) ([]byte, error) {
	e.json.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	dict := d.set(e.json.Bytes())
	e.out.Reset()
	w, _ := d.writers.Get().(*flate.Writer)
	if w == nil {
		var err error
		if w, err = flate.NewWriterDict(&e.out, deflateLevel, dict); err != nil {
			return nil, err
		}
	} else {
		w.Reset(&e.out)
	}
	defer d.writers.Put(w)
	if _, err := w.Write(e.json.Bytes()); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	deflated := make([]byte, e.out.Len())
	copy(deflated, e.out.Bytes())
	return deflated, nil
}

// decoder is the scratch space of one decode; decoders pools them, as the
// evaluation workers decode concurrently.
type decoder struct {
	in   bytes.Reader
	flat io.ReadCloser
	json bytes.Buffer
}

var decoders = sync.Pool{New: func() any {
	d := new(decoder)
	// in is a bytes.Reader, an io.ByteReader, so flate reads no further
	// than the stream and wraps it in no buffer of its own.
	d.flat = flate.NewReader(&d.in)
	return d
}}

func (d *decoder) release() {
	if d.json.Cap() <= maxPooledBuffer {
		decoders.Put(d)
	}
}

// decode inflates deflated with dict and decodes the JSON. The map shares
// nothing with d: the JSON decoder copies every string it returns.
func (d *decoder) decode(deflated, dict []byte) (map[string]any, error) {
	d.in.Reset(deflated)
	if err := d.flat.(flate.Resetter).Reset(&d.in, dict); err != nil {
		return nil, err
	}
	d.json.Reset()
	if _, err := d.json.ReadFrom(d.flat); err != nil {
		return nil, err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(d.json.Bytes(), &m); err != nil {
		return nil, err
	}
	return m, nil
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

// compactTransform is the cache informers' transform: every listed or
// watched object is cached as an Object. It never fails, since a
// transform error would abort a whole list: an object that cannot be encoded
// is logged here and cached with its error, which Decode reports.
func compactTransform(log *slog.Logger, resource string) cache.TransformFunc {
	// One transform per informer: the resource's objects share a
	// dictionary, chosen among samples of them (dictionary.go), which lives
	// as long as the objects deflated with it.
	dicts := newChooser()
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *Object:
			// A watch-list's initial objects go through the transform
			// in the reflector's temporary store and again when they
			// replace the FIFO's content.
			return o, nil
		case *unstructured.Unstructured:
			key := o.GetNamespace()
			if key == "" {
				key = "/" + o.GetName()
			}
			dict, sample := dicts.dictionary(key)
			c := compact(o, dict)
			if sample {
				dicts.offer(key, o.Object)
			} else if dict == dicts.none {
				dicts.choose()
			}
			if c.err != nil {
				log.Error("cluster cache: object not cached compact; reading it will fail", "resource", resource, "error", c.err)
			}
			return c, nil
		default:
			// Tombstones and anything else the informer passes: left
			// alone (client-go does not transform tombstones).
			return obj, nil
		}
	}
}
