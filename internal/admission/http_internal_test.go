package admission

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestBodyBuffersKeepOnlyWhatIsSmall: a body buffer that grew past
// maxPooledBody is not kept for the next request, so a client that sends
// megabytes leaves no megabyte buffer behind in the pool; one that is kept
// is reset first.
func TestBodyBuffersKeepOnlyWhatIsSmall(t *testing.T) {
	h := &reviewHandler{}
	big := h.bodyBuffer()
	big.Grow(maxPooledBody + 1)
	if h.releaseBody(big) {
		t.Errorf("a %d-byte buffer was kept; want at most %d", big.Cap(), maxPooledBody)
	}
	small := h.bodyBuffer()
	small.WriteString("{}")
	if !h.releaseBody(small) {
		t.Errorf("a %d-byte buffer was dropped; want it kept", small.Cap())
	}
	if small.Len() != 0 {
		t.Errorf("a buffer handed back holds %q; want it reset", small.String())
	}
}

// TestDecodedReviewKeepsNoBodyBytes: what decodeReview returns, and the
// error it returns, hold nothing of the body's bytes, so the body's buffer
// can serve the next request (another namespace's) as soon as the review
// is decoded. Each body is decoded from a buffer that is then overwritten,
// and compared with the same body decoded from bytes nobody touches.
func TestDecodedReviewKeepsNoBodyBytes(t *testing.T) {
	bodies := map[string]string{
		"pod":      strings.Replace(reviewBody, `"dryRun":false`, `"dryRun":false,"options":{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`, 1),
		"delete":   strings.Replace(strings.Replace(reviewBody, `"object":{`, `"oldObject":{`, 1), `"operation":"CREATE"`, `"operation":"DELETE"`, 1),
		"bad type": `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`,
		"syntax":   `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"`,
		"bad op":   strings.Replace(reviewBody, `"operation":"CREATE"`, `"operation":"PATCH-\u00e9"`, 1),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			want, wantErr := decodeReview([]byte(body))
			buf := bytes.NewBufferString(body)
			got, err := decodeReview(buf.Bytes())
			raw := buf.Bytes()[:buf.Cap()]
			for i := range raw {
				raw[i] = 'x'
			}
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("error %v after the body was overwritten, want %v", err, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the review changed with its body's bytes:\n got %+v\nwant %+v", got.Request, want.Request)
			}
		})
	}
}

const reviewBody = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",` +
	`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},` +
	`"name":"p","namespace":"team-a","operation":"CREATE","userInfo":{"username":"alice","uid":"a-1","groups":["dev"],"extra":{"k":["v"]}},` +
	`"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"team-a","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx:1"}]}},` +
	`"dryRun":false}}`
