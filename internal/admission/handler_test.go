package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// post sends body to wh and decodes the AdmissionReview response.
func post(t *testing.T, wh http.Handler, body string) *admissionv1.AdmissionResponse {
	t.Helper()
	return postPath(t, wh, admission.Path, body)
}

// postPath is post to path, which may carry a query.
func postPath(t *testing.T, wh http.Handler, path, body string) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	wh.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusOK || out.Response == nil {
		t.Fatalf("HTTP %d: %v: %s", rec.Code, err, rec.Body)
	}
	return out.Response
}

func TestDecisionsOffline(t *testing.T) {
	logs := &syncWriter{}
	wh := offlineWebhook(t, admission.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})

	// Deny, with the rule and container; the erroring dryrun rule (onError
	// allow) adds a warning; the audit-only rule is not evaluated.
	resp := post(t, wh, review("u1", "CREATE", "default", true))
	if resp.Allowed || resp.Result.Code != http.StatusForbidden || resp.Result.Message != "[no-privileged] privileged (container: c)" {
		t.Errorf("CREATE privileged: %+v", resp.Result)
	}
	if len(resp.Warnings) != 1 || !strings.HasPrefix(resp.Warnings[0], "[errs] evaluation error: invalid operation: int(p)") {
		t.Errorf("warnings: %q", resp.Warnings)
	}
	if strings.Contains(resp.Result.Message, "audit only") {
		t.Error("an audit-only rule ran at admission")
	}

	// Rules check CREATE and UPDATE unless they list DELETE: deleting a
	// violating pod is always possible.
	if resp := post(t, wh, review("u2", "DELETE", "default", true)); !resp.Allowed || resp.UID != "u2" {
		t.Errorf("DELETE of a privileged pod: %+v", resp)
	}
	if resp := post(t, wh, review("u3", "DELETE", "default", false)); !resp.Allowed {
		t.Errorf("DELETE of a plain pod: %+v", resp.Result)
	}

	// Break-glass.
	if resp := post(t, wh, review("u4", "CREATE", "glass", true)); !resp.Allowed || len(resp.Warnings) != 1 ||
		!strings.Contains(resp.Warnings[0], "namespace glass is annotated portal.io/bypass=true: rules were not evaluated") {
		t.Errorf("bypass namespace: %+v", resp)
	}
	if got := testutil.ToFloat64(wh.Metrics().Bypass.WithLabelValues("glass")); got != 1 {
		t.Errorf("bypass count %v", got)
	}
	if len(logs.lines(`"msg":"admission bypassed"`, `"user":"alice"`, `"namespace":"glass"`)) != 1 {
		t.Errorf("no audit line:\n%s", logs)
	}
	m := wh.Metrics()
	for d, want := range map[string]float64{admission.DecisionDenied: 1, admission.DecisionAllowed: 2, admission.DecisionBypassed: 1, admission.DecisionError: 0} {
		if got := testutil.ToFloat64(m.Requests.WithLabelValues(d)); got != want {
			t.Errorf("decision %s: got %v, want %v", d, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.Latency); n != 1 {
		t.Errorf("latency histogram: %d series", n)
	}
}

// panicky is an Evaluator that fails the way a bug would.
type panicky struct{}

func (panicky) Evaluate(context.Context, *unstructured.Unstructured, engine.Options) ([]core.Result, error) {
	panic("boom")
}

func TestPanicIsRecoveredAndFailsReadiness(t *testing.T) {
	wh, err := admission.New(admission.Options{
		Evaluator: panicky{}, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		Health: admission.HealthOptions{Window: 4, MaxFailures: 1, MaxAge: 300 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		resp := post(t, wh, review("p", "CREATE", "default", false))
		if resp.Allowed || resp.Result.Code != http.StatusInternalServerError || !strings.Contains(resp.Result.Message, "panic: boom") {
			t.Fatalf("request %d: %+v", i, resp.Result)
		}
	}
	if got := testutil.ToFloat64(wh.Metrics().Requests.WithLabelValues(admission.DecisionError)); got != 2 {
		t.Errorf("error decisions: %v", got)
	}
	err = wh.ReadyCheck()(nil)
	if err == nil || !strings.Contains(err.Error(), "2 of the last 4 requests failed") {
		t.Fatalf("readiness after 2 failures: %v", err)
	}
	// Failures age out, so a replica taken out of the Service gets another
	// chance.
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return wh.ReadyCheck()(nil) == nil, nil }); err != nil {
		t.Fatalf("readiness did not recover: %v", err)
	}
}

func TestFailOpenAdmitsInternalErrors(t *testing.T) {
	wh, err := admission.New(admission.Options{
		Evaluator: panicky{}, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), FailOpen: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, wh, review("p", "CREATE", "default", false))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "admitted: Portal runs fail-open") {
		t.Fatalf("fail-open: %+v", resp)
	}
}

func TestNotReadyUntilRulesLoaded(t *testing.T) {
	loaded := make(chan struct{})
	wh := offlineWebhook(t, admission.Options{RulesLoaded: loaded})
	if err := wh.ReadyCheck()(nil); err == nil || !strings.Contains(err.Error(), "rules not loaded yet") {
		t.Fatalf("readiness before load: %v", err)
	}
	resp := post(t, wh, review("l1", "CREATE", "default", false))
	if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable || !strings.Contains(resp.Result.Message, "rules are still loading") {
		t.Fatalf("before load: %+v", resp.Result)
	}
	// Break-glass works even before the rules load.
	if resp := post(t, wh, review("l2", "CREATE", "glass", true)); !resp.Allowed {
		t.Fatalf("bypass before load: %+v", resp.Result)
	}
	close(loaded)
	if err := wh.ReadyCheck()(nil); err != nil {
		t.Fatalf("readiness after load: %v", err)
	}
	if resp := post(t, wh, review("l3", "CREATE", "default", false)); !resp.Allowed {
		t.Fatalf("after load: %+v", resp.Result)
	}
	// Not-loaded answers are not handler failures.
	if got := testutil.ToFloat64(wh.Metrics().Requests.WithLabelValues(admission.DecisionError)); got != 1 {
		t.Errorf("error decisions: %v", got)
	}
}

// TestHandleMalformedObject: an object that is not a JSON object is refused
// as malformed (400 BadRequest), counted as such, and is neither an error
// decision nor a handler failure for readiness, however many arrive.
func TestHandleMalformedObject(t *testing.T) {
	wh := offlineWebhook(t, admission.Options{Health: admission.HealthOptions{Window: 4, MaxFailures: 1}})
	req := ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "m", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(`[1]`)},
	}}
	req.Kind.Version, req.Kind.Kind = "v1", "Pod"
	for range 10 {
		resp := wh.Handle(context.Background(), req)
		if resp.Allowed || resp.Result.Code != http.StatusBadRequest || resp.Result.Reason != metav1.StatusReasonBadRequest ||
			!strings.Contains(resp.Result.Message, "malformed AdmissionReview: decode request.object") {
			t.Fatalf("%+v", resp.Result)
		}
	}
	if err := wh.ReadyCheck()(nil); err != nil {
		t.Errorf("readiness after malformed objects: %v", err)
	}
	m := wh.Metrics()
	if got := testutil.ToFloat64(m.Malformed.WithLabelValues(admission.MalformedObjectUndecoded)); got != 10 {
		t.Errorf("malformed count %v, want 10", got)
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(admission.DecisionError)); got != 0 {
		t.Errorf("error decisions %v, want 0", got)
	}
}

// TestConcurrentReviewsGetTheirOwnAnswers sends reviews from many clients
// at once, as the API server does: the handler reuses request body buffers,
// and each answer must still be its own request's (its UID, its verdict).
func TestConcurrentReviewsGetTheirOwnAnswers(t *testing.T) {
	wh := offlineWebhook(t, admission.Options{})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 50 {
				uid := fmt.Sprintf("c%d-%d", c, i)
				privileged := (c+i)%2 == 0
				body := review(uid, "CREATE", "default", privileged)
				if i%10 == 0 {
					// A body past the pooled size now and then, padded
					// where the decoder ignores it.
					body = strings.Replace(body, `"dryRun":false`, `"dryRun":false,"pad":"`+strings.Repeat("x", 80<<10)+`"`, 1)
				}
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, admission.Path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				wh.ServeHTTP(rec, req)
				var out admissionv1.AdmissionReview
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
					t.Errorf("%s: HTTP %d: %v: %s", uid, rec.Code, err, rec.Body)
					return
				}
				if out.Response.UID != types.UID(uid) || out.Response.Allowed == privileged {
					t.Errorf("request %s (privileged %v): answered for %s, allowed %v", uid, privileged, out.Response.UID, out.Response.Allowed)
				}
			}
		})
	}
	wg.Wait()
}
