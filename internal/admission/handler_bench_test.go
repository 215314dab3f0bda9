package admission_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// compliantPodReview is an AdmissionReview as the API server sends it for a
// pod of three containers that the pod-security bundle admits: defaults
// filled in and managedFields, about 4 KB.
const compliantPodReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"0b5e0e6c-1c0e-4c5e-9d1b-7f0b8a7e6f01",
"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
"requestKind":{"group":"","version":"v1","kind":"Pod"},"requestResource":{"group":"","version":"v1","resource":"pods"},
"name":"web-0","namespace":"bench","operation":"CREATE","userInfo":{"username":"system:serviceaccount:bench:deployer","groups":["system:serviceaccounts","system:authenticated"]},
"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"bench","labels":{"app":"web"},
"managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{}}}}}}]},
"spec":{"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}},
"containers":[` + benchContainer + `,` + benchContainer + `,` + benchContainer + `],
"volumes":[{"name":"tmp","emptyDir":{}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","schedulerName":"default-scheduler","enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority","priority":0}},
"oldObject":null,"dryRun":true,"options":{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}}}`

const benchContainer = `{"name":"app","image":"registry.example.com/team/web:1.27","ports":[{"containerPort":8080,"protocol":"TCP"}],
"resources":{"limits":{"cpu":"500m","memory":"256Mi"},"requests":{"cpu":"100m","memory":"128Mi"}},
"securityContext":{"allowPrivilegeEscalation":false,"runAsNonRoot":true,"capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"}},
"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}`

// BenchmarkHandler is Portal's own part of an admission request: the
// review above through the webhook's HTTP handler, with the pod-security
// bundle (19 rules) loaded, to the encoded response. What the API server
// adds (encoding the review, TLS, HTTP on loopback) is measured by
// test/bench/admission. It reports the median and 99th percentile of single
// requests; -cpu 1 measures one core.
func BenchmarkHandler(b *testing.B) {
	eng := engine.New(exprlang.New())
	bundle := filepath.Join("..", "..", "examples", "rules", "pod-security")
	rules, errs := rule.LoadPaths(eng, []string{filepath.Join(bundle, "baseline"), filepath.Join(bundle, "restricted")})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	eng.SetRules(rules)
	wh, err := admission.New(admission.Options{
		Evaluator:  eng,
		Namespaces: fake.NewClientBuilder().WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}).Build(),
		Registerer: prometheus.NewRegistry(),
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	var rec *httptest.ResponseRecorder
	b.SetBytes(int64(len(compliantPodReview)))
	b.ReportAllocs()
	for b.Loop() {
		rec = httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, admission.Path, strings.NewReader(compliantPodReview))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		wh.ServeHTTP(rec, req)
		samples = append(samples, time.Since(start))
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || !out.Response.Allowed || len(out.Response.Warnings) > 0 {
		b.Fatalf("HTTP %d, want the pod admitted without warnings: %s", rec.Code, rec.Body)
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
}
