package admission_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// review is an AdmissionReview for a pod, as the API server sends it.
func review(uid, op, ns string, privileged bool) string {
	obj := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":%q},"spec":{"containers":[{"name":"c","image":"nginx:1","securityContext":{"privileged":%v}}]}}`, ns, privileged)
	objField, oldField := `"object":`+obj, `"oldObject":null`
	if op == "DELETE" {
		objField, oldField = `"object":null`, `"oldObject":`+obj
	}
	return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":%q,`+
		`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},`+
		`"name":"p","namespace":%q,"operation":%q,"userInfo":{"username":"alice","groups":["dev"]},%s,%s,"dryRun":false}}`,
		uid, ns, op, objField, oldField)
}

var malformed = []struct {
	name, contentType, method, body string
	code                            int
	message                         string
}{
	{"empty body", "application/json", "POST", "", 400, "malformed AdmissionReview: the request body is empty"},
	{"not JSON", "application/json", "POST", "hello", 400, "malformed AdmissionReview: the body is not a JSON object"},
	{"JSON array", "application/json", "POST", "[1,2]", 400, "malformed AdmissionReview: the body is not a JSON object"},
	{"no request kind", "application/json", "POST", `{"request":{"uid":"1"}}`, 400, "malformed AdmissionReview: request.kind must name a version and kind"},
	{"v1beta1", "application/json", "POST", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1"}}`, 400, "apiVersion and kind must be admission.k8s.io/v1 AdmissionReview"},
	{"other kind", "application/json", "POST", `{"apiVersion":"v1","kind":"Pod"}`, 400, "apiVersion and kind must be admission.k8s.io/v1 AdmissionReview"},
	{"no request", "application/json", "POST", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400, "malformed AdmissionReview: request is missing"},
	{"no uid", "application/json", "POST", strings.Replace(review("x", "CREATE", "ns", false), `"uid":"x",`, "", 1), 400, "malformed AdmissionReview: request.uid is empty"},
	{"bad operation", "application/json", "POST", review("x", "PATCH", "ns", false), 400, `malformed AdmissionReview: request.operation "PATCH" is not one of`},
	{"wrong field type", "application/json", "POST", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, 400, "malformed AdmissionReview: "},
	{"content type", "text/plain", "POST", review("x", "CREATE", "ns", false), 415, `Content-Type "text/plain" is not supported`},
	{"method", "application/json", "GET", "", 405, "method GET not allowed"},
}

// TestMalformedAdmissionReview sends broken bodies to the running webhook
// over HTTPS, as a misbehaving client would.
func TestMalformedAdmissionReview(t *testing.T) {
	cluster(t)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: env.cert.pool}}}
	url := admission.LocalURL(env.portal.port)
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(context.Background(), tc.method, url, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tc.contentType)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var st metav1.Status
			body, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatalf("body is not a Status: %v: %s", err, body)
			}
			if resp.StatusCode != tc.code || st.Code != int32(tc.code) || !strings.Contains(st.Message, tc.message) {
				t.Fatalf("got HTTP %d %q, want %d containing %q", resp.StatusCode, st.Message, tc.code, tc.message)
			}
		})
	}

	// A well-formed review still works on the same connection pool.
	resp, err := hc.Post(url, "application/json", strings.NewReader(review("ok-1", "CREATE", "default", false)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Response == nil || out.Response.UID != "ok-1" || !out.Response.Allowed {
		t.Fatalf("well-formed review: HTTP %d, %v, %+v", resp.StatusCode, err, out.Response)
	}
}

// offlineWebhook is a webhook with compiled rules and a fake namespace
// reader, for tests that need no API server.
func offlineWebhook(t testing.TB, opts admission.Options) *admission.Webhook {
	t.Helper()
	eng := engine.New(exprlang.New())
	var rules []*engine.Rule
	for _, r := range []*core.Rule{
		{Name: "no-privileged", Enabled: true, Modes: []core.Mode{core.ModeAdmission}, EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny,
			Match: core.Match{GVKs: []core.GVK{{Kind: "Pod"}}}, Expression: "container.securityContext.privileged == true", Message: "privileged"},
		{Name: "frozen", Enabled: true, Modes: []core.Mode{core.ModeAdmission}, EnforcementAction: core.ActionWarn, OnError: core.OnErrorAllow,
			Match: core.Match{GVKs: []core.GVK{{Kind: "Pod"}}}, Expression: `request.oldObject?.metadata?.labels?.frozen == "true"`, Message: "frozen"},
		{Name: "errs", Enabled: true, Modes: []core.Mode{core.ModeAdmission}, EnforcementAction: core.ActionDryRun, OnError: core.OnErrorAllow,
			Match: core.Match{GVKs: []core.GVK{{Kind: "Pod"}}}, Expression: `int(object.metadata.name) > 0`},
		{Name: "audit-only", Enabled: true, Modes: []core.Mode{core.ModeAudit}, EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny,
			Match: core.Match{GVKs: []core.GVK{{Kind: "Pod"}}}, Expression: "true", Message: "audit only"},
	} {
		c, err := eng.Compile(r)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, c)
	}
	eng.SetRules(rules)
	opts.Evaluator = eng
	opts.Namespaces = fake.NewClientBuilder().WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "glass", Annotations: map[string]string{admission.BypassAnnotation: "true"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
	).Build()
	opts.Registerer = prometheus.NewRegistry()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	wh, err := admission.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

// FuzzAdmissionReview feeds arbitrary bodies to the HTTP handler: it never
// panics, and always answers either HTTP 200 with an AdmissionReview
// response for the request's uid, or an HTTP error with a Status.
func FuzzAdmissionReview(f *testing.F) {
	wh := offlineWebhook(f, admission.Options{})
	for _, tc := range malformed {
		f.Add([]byte(tc.body))
	}
	for _, op := range []string{"CREATE", "UPDATE", "DELETE", "CONNECT"} {
		for _, ns := range []string{"default", "glass", ""} {
			f.Add([]byte(review("u-"+op, op, ns, true)))
		}
	}
	f.Add([]byte(strings.Replace(review("u", "CREATE", "default", true), `"object":{`, `"object":{"x":`, 1)))
	f.Add([]byte(strings.Replace(review("u", "UPDATE", "default", false), `"oldObject":null`, `"oldObject":[]`, 1)))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, admission.Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		wh.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var in struct {
				Request struct {
					UID string `json:"uid"`
				} `json:"request"`
			}
			if err := utiljson.Unmarshal(body, &in); err != nil {
				t.Fatalf("HTTP 200 for a body that does not decode: %v", err)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("HTTP 200 without an AdmissionReview response: %v: %s", err, rec.Body)
			}
			if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || string(out.Response.UID) != in.Request.UID {
				t.Fatalf("bad response: %s (request uid %q)", rec.Body, in.Request.UID)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			var st metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Message == "" || st.Code != int32(rec.Code) {
				t.Fatalf("HTTP %d without a Status: %v: %s", rec.Code, err, rec.Body)
			}
		default:
			t.Fatalf("unexpected HTTP %d: %s", rec.Code, rec.Body)
		}
	})
}
