package admission

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsjson "sigs.k8s.io/json"
)

// Path is where the webhook server serves the validating handler.
const Path = "/validate"

// maxRequestBytes bounds an AdmissionReview body: two objects of at most 3 MiB
// (the API server's own limit) and the rest of the request, as in
// controller-runtime.
const maxRequestBytes = 7 << 20

// maxPooledBody is the largest body buffer kept for the next request. A
// pod's review with managedFields is 4 to 16 KB; a larger body (a ConfigMap
// near the API server's limit, or a client that sends megabytes) grows its
// buffer past this, and that buffer goes to the collector instead of back to
// the pool. So each buffer the pool keeps is at most this big, and it keeps
// no more of them than requests were in flight at once (sync.Pool lets the
// extra go over the next two collections), whatever is sent. bytes.Buffer
// wants 512 bytes free before each read, so bodies from 64 KiB - 512 bytes
// on grow past it too.
const maxPooledBody = 64 << 10

// reviewHandler serves AdmissionReview v1 over HTTP. It replaces
// controller-runtime's admission.Webhook.ServeHTTP, which answers a malformed
// body with HTTP 200 and an AdmissionReview whose response carries the error
// (and, for a body with no request, calls the handler with an empty one);
// here a body that is not a usable AdmissionReview gets HTTP 400 with a
// message that says what is wrong. Well-formed reviews go through
// admission.Webhook.Handle as usual.
type reviewHandler struct {
	hook        *admission.Webhook
	log         *slog.Logger
	metrics     *Metrics
	bodyTimeout time.Duration
	// defaultTimeout is the deadline of a request without ?timeout=;
	// DefaultRequestTimeout but in tests.
	defaultTimeout time.Duration
	// bodies holds *bytes.Buffer for request bodies: io.ReadAll made a
	// new slice for every body, growing it as the bytes came, about 7 KB
	// of a 4 KB pod review's allocations. A buffer goes back once the
	// review is decoded, which copies what it keeps (strings, and the
	// objects' raw bytes: TestDecodedReviewKeepsNoBodyBytes).
	bodies sync.Pool
}

func (h *reviewHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reject(w, r, MalformedMethod, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: POST an AdmissionReview", r.Method))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.reject(w, r, MalformedContentType, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not supported: send application/json", r.Header.Get("Content-Type")))
		return
	}
	// The server has a header timeout but none for the body: a client that
	// trickles one would hold this goroutine and its buffer indefinitely.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.bodyTimeout))
	body := h.bodyBuffer()
	_, err := body.ReadFrom(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		h.releaseBody(body)
		h.reject(w, r, MalformedUnreadable, http.StatusBadRequest, fmt.Sprintf("cannot read the request body: %v", err))
		return
	}
	if body.Len() > maxRequestBytes {
		h.releaseBody(body)
		h.reject(w, r, MalformedTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxRequestBytes))
		return
	}
	review, err := decodeReview(body.Bytes())
	h.releaseBody(body)
	if err != nil {
		reason := MalformedInvalidRequest
		if me := (*malformedError)(nil); errors.As(err, &me) {
			reason = me.reason
		}
		h.reject(w, r, reason, http.StatusBadRequest, "malformed AdmissionReview: "+err.Error())
		return
	}
	ctx, cancel := requestContext(r, h.defaultTimeout)
	defer cancel()
	resp := h.hook.Handle(ctx, admission.Request{AdmissionRequest: *review.Request})
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &resp.AdmissionResponse,
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&out); err != nil {
		h.log.Error("cannot write the admission response", "uid", string(review.Request.UID), "error", err)
	}
}

// bodyBuffer returns an empty buffer for a request body, one an earlier
// request used when there is one.
func (h *reviewHandler) bodyBuffer() *bytes.Buffer {
	if b, ok := h.bodies.Get().(*bytes.Buffer); ok {
		return b
	}
	return new(bytes.Buffer)
}

// releaseBody resets b and hands it back for the next request, unless it
// grew past maxPooledBody; it reports whether b was kept. Nothing may read
// b, or a slice of it, afterwards.
func (h *reviewHandler) releaseBody(b *bytes.Buffer) (kept bool) {
	if b.Cap() > maxPooledBody {
		return false
	}
	b.Reset()
	h.bodies.Put(b)
	return true
}

// malformedError is request content Portal refuses to decide on: the reason
// is the label of portal_admission_malformed_total.
type malformedError struct {
	reason string
	err    error
}

func (e *malformedError) Error() string { return e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

func malformed(reason string, err error) error { return &malformedError{reason: reason, err: err} }

// The deadlines of one request. The API server sends its webhook timeout
// (timeoutSeconds: 10 s unless set, at most 30 s) as ?timeout=. A request
// without one, which only a client other than the API server sends, gets
// the API server's default instead of none, so it cannot keep an
// evaluation running for as long as it holds the connection open; and no
// request gets more than the API server's maximum.
const (
	DefaultRequestTimeout = 10 * time.Second
	MaxRequestTimeout     = 30 * time.Second
)

// requestContext is the request's context with the deadline the API server
// sends as ?timeout= (def without one, at most MaxRequestTimeout),
// shortened by a tenth so that rule evaluations stopped by it still answer
// (with their error) before the API server gives up.
func requestContext(r *http.Request, def time.Duration) (context.Context, context.CancelFunc) {
	d, err := time.ParseDuration(r.URL.Query().Get("timeout"))
	if err != nil || d <= 0 {
		d = def
	}
	d = min(d, MaxRequestTimeout)
	return context.WithTimeout(r.Context(), d-d/10)
}

// decodeReview decodes and checks an AdmissionReview v1 request. The errors
// are *malformedError and read as the second half of "malformed
// AdmissionReview: ...".
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	if len(body) == 0 {
		return nil, malformed(MalformedNotJSON, errors.New("the request body is empty"))
	}
	// One pass of the decoder the API machinery's JSON serializer uses
	// (case-sensitive, whole numbers kept as integers), without the
	// serializer: it read the whole body once more to find apiVersion and
	// kind, a third of the handler's CPU for a pod.
	review := &admissionv1.AdmissionReview{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, review); err != nil {
		var syntax map[string]any
		if jerr := json.Unmarshal(body, &syntax); jerr != nil {
			return nil, malformed(MalformedNotJSON, fmt.Errorf("the body is not a JSON object: %v", jerr))
		}
		return nil, malformed(MalformedInvalidRequest, err)
	}
	// As the serializer did: what the body leaves out is the type's own.
	want := admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
	apiVersion, kind := cmp.Or(review.APIVersion, want.GroupVersion().String()), cmp.Or(review.Kind, want.Kind)
	if apiVersion != want.GroupVersion().String() || kind != want.Kind {
		return nil, malformed(MalformedWrongType, fmt.Errorf("apiVersion and kind must be admission.k8s.io/v1 AdmissionReview, got apiVersion %q, kind %q", review.APIVersion, review.Kind))
	}
	req := review.Request
	switch {
	case req == nil:
		return nil, malformed(MalformedNoRequest, errors.New("request is missing"))
	case req.UID == "":
		return nil, malformed(MalformedInvalidRequest, errors.New("request.uid is empty"))
	case req.Kind.Kind == "" || req.Kind.Version == "":
		return nil, malformed(MalformedInvalidRequest, errors.New("request.kind must name a version and kind"))
	}
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
	default:
		return nil, malformed(MalformedInvalidRequest, fmt.Errorf("request.operation %q is not one of CREATE, UPDATE, DELETE, CONNECT", req.Operation))
	}
	return review, nil
}

var statusReasons = map[int]metav1.StatusReason{
	http.StatusBadRequest:            metav1.StatusReasonBadRequest,
	http.StatusMethodNotAllowed:      metav1.StatusReasonMethodNotAllowed,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusUnsupportedMediaType:  metav1.StatusReasonUnsupportedMediaType,
}

// reject answers a request that is not a usable AdmissionReview with an HTTP
// error and a Kubernetes Status body, and counts it. It never touches
// readiness: what a client sends says nothing about Portal's health. The log
// line is at debug level so a flood of them cannot flood the logs; the
// metric counts every one.
func (h *reviewHandler) reject(w http.ResponseWriter, r *http.Request, reason string, code int, msg string) {
	h.metrics.Malformed.WithLabelValues(reason).Inc()
	h.log.Debug("malformed admission request", "reason", reason, "code", code, "remote", r.RemoteAddr, "error", msg)
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   statusReasons[code],
		Code:     int32(code),
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&st)
}
