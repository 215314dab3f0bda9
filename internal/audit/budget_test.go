package audit_test

import (
	"strings"
	"testing"
	"time"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// hostileExpr never finishes within a day on a labelled pod; only the audit
// deadline stops it (the test lifts the operation budget).
const hostileExpr = `let a = 1..1000; object.metadata.labels?.hostile == "true" && all(a, {all(a, {all(a, {all(a, {# > 0})})})})`

// TestAuditWorkerNotHeldByARule: with one audit worker and a rule that
// would run for hours on some pods, every other pod is still audited: each
// object's evaluation has a deadline, and the rule's result on the hostile
// pods is an error.
func TestAuditWorkerNotHeldByARule(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "budget")
	startInstance(t, instanceOptions{
		rules:       podRule("hostile", ns, hostileExpr, "never") + podRule("no-privileged", ns, privileged, "privileged"),
		limits:      exprlang.Limits{Operations: 1 << 60, Bytes: 1 << 40},
		workers:     1,
		evalTimeout: 300 * time.Millisecond,
	})
	for _, name := range []string{"h1", "h2"} {
		create(t, c, pod(ns, name, false, map[string]string{"hostile": "true"}))
	}
	for _, name := range []string{"a", "b", "c"} {
		create(t, c, pod(ns, name, true, nil))
	}
	st := waitReport(t, c, ns, "privileged pods reported and hostile ones in error", func(st reportState) bool {
		return st.fail == 3 && errorsOf(st, "hostile") == 2
	})
	for _, r := range st.reports {
		for _, res := range r.Results {
			if res.Result == reportsv1alpha2.ResultError && !strings.Contains(res.Message, "deadline") {
				t.Errorf("error result %q does not name the deadline", res.Message)
			}
		}
	}
}

func errorsOf(st reportState, policy string) int {
	n := 0
	for _, r := range st.reports {
		for _, res := range r.Results {
			if res.Policy == policy && res.Result == reportsv1alpha2.ResultError {
				n++
			}
		}
	}
	return n
}
