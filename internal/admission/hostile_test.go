package admission_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// hostile is one request a pod that can reach the webhook port might send.
type hostile struct {
	name, method, contentType, body string
	// times it is sent in the flood.
	times int
	// code is the HTTP status; for 200, the AdmissionReview's result code.
	code    int
	message string
	// reason is the portal_admission_malformed_total label it counts
	// under; empty for a well-formed review Portal simply decides.
	reason string
}

// reviewFor is an AdmissionReview for kind with raw object and oldObject.
func reviewFor(uid, op, group, version, kind, ns, object, oldObject string) string {
	return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":%q,`+
		`"kind":{"group":%q,"version":%q,"kind":%q},"resource":{"group":%q,"version":%q,"resource":"things"},`+
		`"name":"x","namespace":%q,"operation":%q,"userInfo":{"username":"mallory"},"object":%s,"oldObject":%s}}`,
		uid, group, version, kind, group, version, ns, op, object, oldObject)
}

const hostileNS = "adm-hostile"

var hostileRequests = []hostile{
	{"bad JSON", "POST", "application/json", `{"apiVersion":`, 25, 400, "malformed AdmissionReview: the body is not a JSON object", admission.MalformedNotJSON},
	{"empty body", "POST", "application/json", ``, 25, 400, "malformed AdmissionReview: the request body is empty", admission.MalformedNotJSON},
	{"wrong apiVersion", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1"}}`, 25, 400,
		"apiVersion and kind must be admission.k8s.io/v1 AdmissionReview", admission.MalformedWrongType},
	{"wrong kind", "POST", "application/json", `{"apiVersion":"v1","kind":"Pod"}`, 25, 400,
		"apiVersion and kind must be admission.k8s.io/v1 AdmissionReview", admission.MalformedWrongType},
	{"missing request", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 25, 400,
		"malformed AdmissionReview: request is missing", admission.MalformedNoRequest},
	{"request of the wrong type", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, 25, 400,
		"malformed AdmissionReview: ", admission.MalformedInvalidRequest},
	{"huge body", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":"` + strings.Repeat("a", 8<<20) + `"}`, 3, 413,
		"request body is larger than", admission.MalformedTooLarge},
	{"wrong content type", "POST", "text/plain", review("ct", "CREATE", hostileNS, true), 25, 415,
		`Content-Type "text/plain" is not supported: send application/json`, admission.MalformedContentType},
	{"wrong method", "PUT", "application/json", review("m", "CREATE", hostileNS, true), 25, 405,
		"method PUT not allowed: POST an AdmissionReview", admission.MalformedMethod},
	{"object not decodable", "POST", "application/json", reviewFor("o1", "CREATE", "", "v1", "Pod", hostileNS, `[1,2]`, `null`), 25, 400,
		"malformed AdmissionReview: decode request.object: ", admission.MalformedObjectUndecoded},
	{"oldObject not decodable", "POST", "application/json",
		reviewFor("o2", "UPDATE", "", "v1", "Pod", hostileNS, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}`, `"a string"`), 25, 400,
		"malformed AdmissionReview: decode request.oldObject: ", admission.MalformedObjectUndecoded},
	{"object not of its kind's shape", "POST", "application/json",
		reviewFor("o3", "CREATE", "apps", "v1", "Deployment", hostileNS, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x","namespace":"`+hostileNS+`"},"spec":{"template":"not a pod template"}}`, `null`), 25, 400,
		"malformed AdmissionReview: build context for Deployment adm-hostile/x: the object does not have the shape of its kind", admission.MalformedObjectShape},
	// Well-formed, for a kind no rule matches: decided (allowed), not
	// malformed, and no more a readiness matter than any other decision.
	{"unknown kind", "POST", "application/json",
		reviewFor("u1", "CREATE", "example.com", "v1", "Gizmo", hostileNS, `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"x"}}`, `null`), 25, 200, "", ""},
}

// send posts h once to the webhook on port and checks the answer is the
// clear rejection (or decision) h expects.
func (h *hostile) send(t *testing.T, hc *http.Client, port int) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), h.method, admission.LocalURL(port), strings.NewReader(h.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", h.contentType)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != h.code || st.Code != int32(h.code) || !strings.Contains(st.Message, h.message) {
			t.Fatalf("%s: got HTTP %d %s (%v), want %d with a Status containing %q", h.name, resp.StatusCode, body, err, h.code, h.message)
		}
		return
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil || out.Response == nil {
		t.Fatalf("%s: HTTP 200 without an AdmissionReview response: %v: %s", h.name, err, body)
	}
	r := out.Response
	switch {
	case h.code == http.StatusOK && !r.Allowed:
		t.Fatalf("%s: want allowed, got %+v", h.name, r.Result)
	case h.code != http.StatusOK && (r.Allowed || r.Result == nil || r.Result.Code != int32(h.code) ||
		r.Result.Reason != metav1.StatusReasonBadRequest || !strings.Contains(r.Result.Message, h.message)):
		t.Fatalf("%s: want rejected with %d BadRequest containing %q, got allowed=%v %+v", h.name, h.code, h.message, r.Allowed, r.Result)
	}
}

// TestHostileReviewsLeaveReadinessAlone floods the running webhook with
// what a pod on the network could send instead of the API server: each is
// rejected with a message that says what is wrong and counted in
// portal_admission_malformed_total, and /readyz stays 200 throughout.
func TestHostileReviewsLeaveReadinessAlone(t *testing.T) {
	cluster(t)
	namespace(t, hostileNS, nil)
	// Deployments need a rule for the engine to look inside their template.
	putRule(t, "adm-hostile-deploy", simpleRule("adm-hostile-deploy", hostileNS,
		policyv1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "spec.hostNetwork == true", "no host network", "deny"), "deployments")
	p := env.portal
	m := p.webhook.Metrics()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: env.cert.pool}}}

	before := map[string]float64{}
	for _, h := range hostileRequests {
		if h.reason != "" {
			before[h.reason] = testutil.ToFloat64(m.Malformed.WithLabelValues(h.reason))
		}
	}
	errorsBefore := testutil.ToFloat64(m.Requests.WithLabelValues(admission.DecisionError))
	want := map[string]float64{}
	for round := range 25 {
		for i := range hostileRequests {
			h := &hostileRequests[i]
			if round >= h.times {
				continue
			}
			h.send(t, hc, p.port)
			if h.reason != "" {
				want[h.reason]++
			}
		}
		if code, err := p.readyz(); err != nil || code != http.StatusOK {
			t.Fatalf("after round %d of the flood /readyz answers %d (%v), want 200", round, code, err)
		}
	}
	for reason, n := range want {
		if got := testutil.ToFloat64(m.Malformed.WithLabelValues(reason)) - before[reason]; got != n {
			t.Errorf("portal_admission_malformed_total{reason=%q} rose by %v, want %v", reason, got, n)
		}
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(admission.DecisionError)); got != errorsBefore {
		t.Errorf("portal_admission_requests_total{decision=\"error\"} moved from %v to %v: malformed requests counted as Portal's failures", errorsBefore, got)
	}
	if err := p.webhook.ReadyCheck()(nil); err != nil {
		t.Errorf("readiness after the flood: %v", err)
	}
	// The API server's own requests are still decided.
	if err := env.client.Create(context.Background(), pod(hostileNS, "after-flood", false), client.DryRunAll); err != nil {
		t.Errorf("a plain pod after the flood: %v", err)
	}
}

// brokenEvaluator fails the way a bug inside Portal would: with an error
// that has nothing to do with the object.
type brokenEvaluator struct{}

func (brokenEvaluator) Evaluate(context.Context, *unstructured.Unstructured, engine.Options) ([]core.Result, error) {
	return nil, errors.New("rule index corrupted")
}

// TestSustainedInternalErrorsFailReadiness: when Portal itself fails on the
// API server's requests, the replica reports not ready, so the Service
// stops sending it requests; and no flood of malformed requests can push
// those failures out of the window and make it ready again.
func TestSustainedInternalErrorsFailReadiness(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const (
		ns   = "adm-internal"
		name = "portal-internal-errors"
	)
	namespace(t, ns, nil)
	putRule(t, "adm-internal", simpleRule("adm-internal", ns, podGVK, "false", "never", "deny"), "pods")
	p, err := startPortal(portalOptions{name: name, logs: &syncWriter{}, evaluator: brokenEvaluator{}, rules: env.engine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.stop()
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.client.Delete(context.Background(), vwc); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	waitCovered(t, name, "pods", true)
	if code, err := p.readyz(); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz before any request: %d %v", code, err)
	}

	// Default health options: more than 5 failures among the last 20. The
	// API server calls a newly written configuration's webhook a moment
	// after it is written: until then creates are admitted without
	// reaching this Portal, so the first failure is waited for.
	internalError := func(i int) error {
		return env.client.Create(ctx, pod(ns, fmt.Sprintf("broken-%d", i), false), client.DryRunAll)
	}
	var last error
	eventually(t, "the API server calling the broken Portal", func() bool {
		last = internalError(0)
		return last != nil
	})
	for i := range 6 {
		err := last
		if i > 0 {
			err = internalError(i)
		}
		if err == nil || !strings.Contains(err.Error(), "portal: internal error evaluating Pod") {
			t.Fatalf("create %d with a broken Portal: got %v, want the internal error", i, err)
		}
	}
	if code, err := p.readyz(); err != nil || code != http.StatusServiceUnavailable && code != http.StatusInternalServerError {
		t.Fatalf("/readyz after 6 internal errors: %d %v, want not ready", code, err)
	}
	if err := p.webhook.ReadyCheck()(nil); err == nil || !strings.Contains(err.Error(), "6 of the last 20 requests failed inside the handler") {
		t.Fatalf("readiness check: %v", err)
	}

	// Malformed requests are not requests Portal decided: however many,
	// they neither count as failures nor push the failures out.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: env.cert.pool}}}
	flood := hostile{name: "object not decodable", method: "POST", contentType: "application/json",
		body: reviewFor("f", "CREATE", "", "v1", "Pod", ns, `[1]`, `null`), code: 400, message: "decode request.object"}
	for range 40 {
		flood.send(t, hc, p.port)
	}
	if err := p.webhook.ReadyCheck()(nil); err == nil || !strings.Contains(err.Error(), "6 of the last 20 requests failed inside the handler") {
		t.Fatalf("readiness check after a flood of malformed requests: %v, want still 6 failures", err)
	}
}

// TestStalledBodyIsCutOff: a client that sends the headers of a review and
// then stops sending its body is answered 400 and disconnected once the body
// read timeout passes, instead of holding a connection, a goroutine and a
// buffer until it chooses to hang up.
func TestStalledBodyIsCutOff(t *testing.T) {
	cluster(t)
	p := env.portal
	m := p.webhook.Metrics()
	before := testutil.ToFloat64(m.Malformed.WithLabelValues(admission.MalformedUnreadable))
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), &tls.Config{RootCAs: env.cert.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"apiVersion\":", admission.Path); err != nil {
		t.Fatal(err)
	}
	// Far beyond the webhook's 2s: without the timeout the read below waits
	// this long and fails.
	if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "cannot read the request body") {
		t.Fatalf("stalled body answered %d: %s", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(m.Malformed.WithLabelValues(admission.MalformedUnreadable)) - before; got != 1 {
		t.Errorf("portal_admission_malformed_total{reason=%q} moved by %v, want 1", admission.MalformedUnreadable, got)
	}
}
