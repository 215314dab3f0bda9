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

func flattenLabels(m map[string]string) flatLabels {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
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
	return flatLabels(b.String())
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
