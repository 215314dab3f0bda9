package policyreport

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/core"
)

// TestSkipNamesItsException: a result an exception exempts is written as
// skip, with properties.exception naming the exception (what Policy
// Reporter shows), and counted in summary.skip, not in fail.
func TestSkipNamesItsException(t *testing.T) {
	x := &core.Exception{Kind: "PortalException", Namespace: "ns", Name: "legacy", Reason: "vendor image"}
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "legacy-0"}
	of := core.ObjectFindings{Object: ref, Findings: []core.Finding{{
		Result:    core.Result{Rule: rule, Resource: ref, Outcome: core.OutcomeSkip, Exception: x, Message: "exempted by PortalException ns/legacy: vendor image"},
		FirstSeen: time.Unix(1700000000, 0),
	}}}
	sc := newScope("ns")
	set(sc, of, limits{results: 10, bytes: 1 << 20})
	data, _, _, err := buildReport(formats[FormatWGPolicy], ReportName, nil, sc, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	results, _, _ := unstructured.NestedSlice(u.Object, "results")
	if len(results) != 1 {
		t.Fatalf("%d results", len(results))
	}
	r := results[0].(map[string]any)
	props, _ := r["properties"].(map[string]any)
	if r["result"] != "skip" || props[PropertyException] != "PortalException ns/legacy" {
		t.Errorf("result %v, properties %v", r["result"], props)
	}
	skip, _, _ := unstructured.NestedInt64(u.Object, "summary", "skip")
	fail, _, _ := unstructured.NestedInt64(u.Object, "summary", "fail")
	if skip != 1 || fail != 0 {
		t.Errorf("summary skip %d fail %d, want 1 and 0", skip, fail)
	}
}
