package admission

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	sigsjson "sigs.k8s.io/json"
)

// FuzzDecodeReviewAsSerializer holds decodeReview to the API machinery's
// serializer it replaced (one pass over the body instead of two): on JSON
// bodies whose apiVersion and kind read the same case-sensitively, as the
// API server writes them, whatever one decodes to an admission.k8s.io/v1
// AdmissionReview the other does too, to the same value, and a body one
// refuses the other refuses (decodeReview also refuses a review whose
// request is unusable). The serializer found apiVersion and kind with
// encoding/json, case-insensitively ("Kind", the Kelvin sign), the last of
// duplicates winning, and filled in a version after a bare group: Portal
// reads the two fields as the rest of the body, case-sensitively, so a
// body that spells them otherwise is out of the comparison.
func FuzzDecodeReviewAsSerializer(f *testing.F) {
	s := runtime.NewScheme()
	if err := admissionv1.AddToScheme(s); err != nil {
		f.Fatal(err)
	}
	deserializer := serializer.NewCodecFactory(s).UniversalDeserializer()
	for _, body := range []string{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"a":1}}}`,
		`{"request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"operation":"DELETE","oldObject":{"b":[1.5,"x",null]}}}`,
		`{"kind":"AdmissionReview","request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","dryRun":true,"options":{"x":1}}}`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","Request":{"uid":"1"}}`,
		`{"apiVersion":"v1","kind":"Pod"}`, `[]`, `{}`, `null`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","Kind":"Pod","request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE"}}`,
		`{"kind":"Pod","Kind":"AdmissionReview","request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE"}}`,
		`{"apiVersion":"admission.k8s.io/","kind":"AdmissionReview","request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE"}}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return // Content-Type is application/json; the serializer also read YAML
		}
		var folded, exact struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		_ = json.Unmarshal(body, &folded)
		_ = sigsjson.UnmarshalCaseSensitivePreserveInts(body, &exact)
		if folded != exact || (exact.APIVersion != "" && exact.APIVersion != "admission.k8s.io/v1") {
			return
		}
		got, err := decodeReview(body)
		want := &admissionv1.AdmissionReview{}
		_, gvk, werr := deserializer.Decode(body, nil, want)
		wantOK := werr == nil && gvk != nil && *gvk == admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
		if err == nil {
			if !wantOK {
				t.Fatalf("decodeReview accepts %q, the serializer did not (%v, %v)", body, gvk, werr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q:\ndecodeReview %+v\nserializer   %+v", body, got, want)
			}
			return
		}
		var me *malformedError
		if !errors.As(err, &me) {
			t.Fatalf("%q: an error that is not a malformedError: %v", body, err)
		}
		if wantOK && me.reason != MalformedNoRequest && me.reason != MalformedInvalidRequest {
			t.Fatalf("%q: refused as %s (%v), the serializer decoded it", body, me.reason, err)
		}
	})
}
