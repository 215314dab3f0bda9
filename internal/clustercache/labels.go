package clustercache

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// flatLabels is a label set as one string: key NUL value NUL, sorted by key.
// A map[string]string of a few labels holds hundreds of bytes of buckets and
// headers per object; this holds the bytes of the labels and one header, and
// a selector reads a handful of labels by linear scan.
type flatLabels string

var _ labels.Labels = flatLabels("")

// labelsRef is flat labels behind a pointer, for matching many objects'
// labels with one selector: a string converted to labels.Labels is an
// allocation per object matched, a pointer set to each object's labels in
// turn none.
type labelsRef struct{ f flatLabels }

var _ labels.Labels = (*labelsRef)(nil)

// Has implements labels.Labels.
func (r *labelsRef) Has(label string) bool { return r.f.Has(label) }

// Get implements labels.Labels.
func (r *labelsRef) Get(label string) string { return r.f.Get(label) }

// Lookup implements labels.Labels.
func (r *labelsRef) Lookup(label string) (string, bool) { return r.f.Lookup(label) }

// flattenLabels flattens m, or returns false when a key or a value holds a
// NUL, which the flat form would read as a separator: an API server never
// accepts one, but a manifest given to --cluster-state may hold anything,
// and "x\x00app\x00web" must not read as app=web.
func flattenLabels(m map[string]string) (flatLabels, bool) {
	if len(m) == 0 {
		return "", true
	}
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return "", false
		}
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return flatLabels(b.String()), true
}

// Has implements labels.Labels.
func (f flatLabels) Has(label string) bool {
	_, ok := f.Lookup(label)
	return ok
}

// Get implements labels.Labels.
func (f flatLabels) Get(label string) string {
	v, _ := f.Lookup(label)
	return v
}

// Lookup implements labels.Labels.
func (f flatLabels) Lookup(label string) (string, bool) {
	s := string(f)
	for s != "" {
		k, rest, _ := strings.Cut(s, "\x00")
		v, rest, _ := strings.Cut(rest, "\x00")
		if k == label {
			return v, true
		}
		s = rest
	}
	return "", false
}

// Map returns the labels as a map.
func (f flatLabels) Map() map[string]string {
	m := map[string]string{}
	s := string(f)
	for s != "" {
		k, rest, _ := strings.Cut(s, "\x00")
		v, rest, _ := strings.Cut(rest, "\x00")
		m[k] = v
		s = rest
	}
	return m
}
