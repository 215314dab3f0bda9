package admission

import (
	"bytes"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/json"
)

const podWithManagedFields = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns",
 "managedFields":[{"manager":"kubectl","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{}}}}}}],
 "labels":{"app":"web"}},"spec":{"containers":[{"name":"app","image":"nginx:1.27","ports":[{"containerPort":8080}]}]}}`

func TestWithoutManagedFields(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"first key", `{"metadata":{"managedFields":[1],"name":"a"}}`, `{"metadata":{"name":"a"}}`},
		{"last key", `{"metadata":{"name":"a", "managedFields":[{"x":"]}"}]}}`, `{"metadata":{"name":"a"}}`},
		{"middle, spaced", "{ \"metadata\" : { \"name\" : \"a\" ,\n \"managedFields\" : null , \"uid\":\"u\" } }", `{"metadata":{"name":"a","uid":"u"}}`},
		{"only key", `{"metadata":{"managedFields":{}}}`, `{"metadata":{}}`},
		{"none", `{"metadata":{"name":"a"}}`, `{"metadata":{"name":"a"}}`},
		{"not in metadata", `{"spec":{"managedFields":[1]},"metadata":{}}`, `{"spec":{"managedFields":[1]},"metadata":{}}`},
		{"metadata not an object", `{"metadata":"x"}`, `{"metadata":"x"}`},
		{"last metadata wins", `{"metadata":{"managedFields":1},"metadata":{"name":"b","managedFields":2}}`, `{"metadata":{"name":"b"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got, want any
			if err := json.Unmarshal(withoutManagedFields([]byte(c.in)), &got); err != nil {
				t.Fatalf("decode %s: %v", withoutManagedFields([]byte(c.in)), err)
			}
			if err := json.Unmarshal([]byte(c.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
	// Duplicated managedFields and escaped keys are left to the decoder.
	for _, in := range []string{`{"metadata":{"managedFields":1,"managedFields":2}}`, `{"metadata":{"managed\u0046ields":1}}`, `{"metadata":{"managedFields":[}}`} {
		if got := string(withoutManagedFields([]byte(in))); got != in {
			t.Errorf("%s: changed to %s", in, got)
		}
	}
}

// FuzzWithoutManagedFields: for any JSON object the decoder accepts, the
// bytes with managedFields cut out decode to the same object without them.
func FuzzWithoutManagedFields(f *testing.F) {
	for _, s := range []string{podWithManagedFields, `{"metadata":{"managedFields":[],"a":"\"}"}}`, `{"metadata":{"a":1,"managedFields":{"b":[1,{"c":"]"}]}}}`, `{}`, `[]`, `{"metadata":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := withoutManagedFields(raw)
		if bytes.Equal(out, raw) {
			// Left to the decoder: nothing to check.
			return
		}
		var want map[string]any
		if err := json.Unmarshal(raw, &want); err != nil || want == nil {
			return
		}
		if md, ok := want["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q decodes, but not without managedFields (%q): %v", raw, out, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q without managedFields (%q):\ngot  %v\nwant %v", raw, out, got, want)
		}
	})
}

func BenchmarkDecodeSubject(b *testing.B) {
	raw := []byte(podWithManagedFields)
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("without-managedFields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeMap(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeReview is what the handler does with a body before any
// rule runs: the AdmissionReview, then the object it carries, as a map.
func BenchmarkDecodeReview(b *testing.B) {
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"0b5e0e6c-1c0e-4c5e-9d1b-7f0b8a7e6f01",` +
		`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},` +
		`"requestKind":{"group":"","version":"v1","kind":"Pod"},"requestResource":{"group":"","version":"v1","resource":"pods"},` +
		`"name":"p","namespace":"ns","operation":"CREATE","userInfo":{"username":"alice","groups":["system:authenticated"]},` +
		`"object":` + podWithManagedFields + `,"oldObject":null,"dryRun":false,"options":{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		review, err := decodeReview(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := decodeMap(review.Request.Object.Raw); err != nil {
			b.Fatal(err)
		}
	}
}
