package clustercache

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// junkPod is a pod a tenant made to be the worst possible dictionary: 30 KB
// of random keys and values and nothing of a pod's usual shape.
func junkPod(t testing.TB) *unstructured.Unstructured {
	r := rand.New(rand.NewPCG(1, 2))
	junk := map[string]any{}
	for len(junk) < 600 {
		junk[fmt.Sprintf("k%x", r.Uint64())] = fmt.Sprintf("%x%x", r.Uint64(), r.Uint64())
	}
	u := decodeJSON(t, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"junk","namespace":"tenant"}}`)
	u.SetAnnotations(nil)
	_ = unstructured.SetNestedField(u.Object, junk, "spec")
	return u
}

// cachedSize runs objects through one informer's transform and returns the
// deflated size of the last.
func cachedSize(t *testing.T, objects []*unstructured.Unstructured) int {
	t.Helper()
	transform := compactTransform(slog.New(slog.DiscardHandler), "pods")
	var last *Object
	for _, u := range objects {
		o, err := transform(u)
		if err != nil {
			t.Fatal(err)
		}
		last = o.(*Object)
	}
	if got, err := last.decode(); err != nil || got.GetName() != objects[len(objects)-1].GetName() {
		t.Fatalf("the last object does not decode: %v", err)
	}
	return len(last.deflated)
}

// TestDictionaryNotChosenByOneObject: a tenant whose odd pod is the first the
// informer caches no longer decides how well every other pod is cached.
// With the first object as the dictionary, pods cached after the junk one
// took about three times the bytes; now they take about what they take
// after an ordinary first pod.
func TestDictionaryNotChosenByOneObject(t *testing.T) {
	var ordinary, hostile []*unstructured.Unstructured
	for i := range 40 {
		p := podVariant(t, i)
		p.SetNamespace(fmt.Sprintf("team-%d", i))
		ordinary = append(ordinary, p)
		hostile = append(hostile, p.DeepCopy())
	}
	hostile = append([]*unstructured.Unstructured{junkPod(t)}, hostile...)
	want, got := cachedSize(t, ordinary), cachedSize(t, hostile)
	t.Logf("a pod cached after an ordinary first pod: %d bytes; after a tenant's junk pod: %d bytes", want, got)
	if got*2 > want*3 {
		t.Errorf("after the junk pod a pod takes %d bytes, more than 1.5 times the %d it takes otherwise", got, want)
	}
}

// TestDictionarySampling: the choice waits for samples from distinct
// namespaces, or for dictionaryAfter objects when there are not as many.
func TestDictionarySampling(t *testing.T) {
	c := newChooser()
	for i := range dictionarySamples - 1 {
		d, sample := c.dictionary(fmt.Sprint("ns-", i))
		if d != c.none || !sample {
			t.Fatalf("object %d: want deflated without a dictionary and sampled", i)
		}
		c.offer(fmt.Sprint("ns-", i), podVariant(t, i).Object)
	}
	if _, sample := c.dictionary("ns-0"); sample {
		t.Error("a second object of a sampled namespace is sampled again")
	}
	c.offer("ns-last", podVariant(t, 99).Object)
	if d, sample := c.dictionary("ns-x"); d == c.none || sample || len(d.data) == 0 {
		t.Fatalf("no dictionary chosen after %d samples", dictionarySamples)
	}

	few := newChooser()
	for i := range dictionaryAfter {
		if d, sample := few.dictionary("only"); sample {
			few.offer("only", podVariant(t, i).Object)
		} else if d == few.none {
			few.choose()
		}
	}
	if d, _ := few.dictionary("only"); d == few.none || len(d.data) == 0 {
		t.Errorf("no dictionary chosen after %d objects of one namespace", dictionaryAfter)
	}
}
