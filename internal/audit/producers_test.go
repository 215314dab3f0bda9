package audit_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// testRule is the rule of the findings the test producer publishes.
var testRule = &core.Rule{Name: "test-exposure", Severity: core.SeverityHigh, Source: core.Source{Kind: "test", Name: "test-exposure"}}

// testFindings is the test producer's state: one finding on each named pod.
func testFindings(ns string, pods ...string) []core.ObjectFindings {
	var out []core.ObjectFindings
	for _, name := range pods {
		ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name}
		out = append(out, core.ObjectFindings{Object: ref, Observed: time.Now(), Findings: []core.Finding{{
			Result:    core.Result{Rule: testRule, Resource: ref, Outcome: core.OutcomeFail, Message: name + " is exposed"},
			FirstSeen: time.Now(),
		}}})
	}
	return out
}

// sources maps "policy/name/container" of every result in the namespace's
// reports to its source, and to its result ID.
func sources(st reportState) (source, id map[string]string) {
	source, id = map[string]string{}, map[string]string{}
	for _, r := range st.reports {
		for _, res := range r.Results {
			source[resultKey(res)] = res.Source
			id[resultKey(res)] = res.Properties["resultID"]
		}
	}
	return source, id
}

// alertState maps "rule/name/container" of the namespace's active alerts to
// their producer label.
func alertState(am *amtest.Server, ns string) (map[string]string, error) {
	as, err := am.Alerts(ns)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, a := range as {
		if a.Status.State == "active" {
			out[a.Labels["rule"]+"/"+a.Labels["name"]+"/"+a.Labels["container"]] = a.Labels["producer"]
		}
	}
	return out, nil
}

func waitAlertState(t *testing.T, am *amtest.Server, ns, what string, want map[string]string) {
	t.Helper()
	var got map[string]string
	eventually(t, 30*time.Second, what, func() (bool, error) {
		var err error
		got, err = alertState(am, ns)
		if err != nil || len(got) != len(want) {
			return false, nil
		}
		for k, v := range want {
			if got[k] != v {
				return false, nil
			}
		}
		return true, nil
	})
}

// Audit and a second producer publish into one pipeline, as audit and the
// network layer will: both producers' findings, on the same pod and on
// others, land in one set of PolicyReports and in Alertmanager, each result
// with its producer as source and each alert with its producer label. Each
// producer's full state replaces only its own findings: the other's stay in
// the reports, and its alerts stay active.
func TestTwoProducersShareThePipeline(t *testing.T) {
	c := cluster(t)
	am := shared(t)
	ns := namespace(t, c, "producers")
	inst := startInstance(t, instanceOptions{
		rules: podRule("audit-privileged", ns, privileged, "container {{ container.name }} is privileged"),
		am:    am, producer: "test",
	})
	create(t, c, pod(ns, "priv", true, nil), pod(ns, "plain", false, nil))
	waitReport(t, c, ns, "audit's finding reported", func(st reportState) bool { return st.has("audit-privileged/priv/c") })

	inst.producer.Publish(core.FindingBatch{Full: true, Objects: testFindings(ns, "priv", "plain")})
	both := func(st reportState) bool {
		return st.has("audit-privileged/priv/c") && st.has("test-exposure/priv/") && st.has("test-exposure/plain/")
	}
	st := waitReport(t, c, ns, "both producers' findings reported", both)
	checkReports(t, st)
	source, ids := sources(st)
	wantSource := map[string]string{"audit-privileged/priv/c": "portal-audit", "test-exposure/priv/": "portal-test", "test-exposure/plain/": "portal-test"}
	for k, v := range wantSource {
		if source[k] != v {
			t.Errorf("result %s has source %q, want %q", k, source[k], v)
		}
	}
	if ids["audit-privileged/priv/c"] == ids["test-exposure/priv/"] || ids["test-exposure/priv/"] == ids["test-exposure/plain/"] {
		t.Errorf("results share a result ID: %v", ids)
	}
	waitAlertState(t, am, ns, "both producers' alerts", map[string]string{
		"audit-privileged/priv/c": "audit", "test-exposure/priv/": "test", "test-exposure/plain/": "test",
	})

	// The test producer's full state is now empty: its findings go, audit's
	// finding on the same pod stays, and so does its alert.
	inst.producer.Publish(core.FindingBatch{Full: true})
	waitReport(t, c, ns, "the test producer's findings cleared, audit's kept", func(st reportState) bool {
		return st.has("audit-privileged/priv/c") && !st.has("test-exposure/priv/") && !st.has("test-exposure/plain/")
	})
	waitAlertState(t, am, ns, "the test producer's alerts resolved, audit's active", map[string]string{"audit-privileged/priv/c": "audit"})

	// Audit's full state becomes empty (its rule is gone, so it stops
	// watching pods and drops its findings): the test producer's stay.
	inst.producer.Publish(core.FindingBatch{Full: true, Objects: testFindings(ns, "priv", "plain")})
	waitReport(t, c, ns, "the test producer's findings back", both)
	waitAlertState(t, am, ns, "the test producer's alerts back", map[string]string{
		"audit-privileged/priv/c": "audit", "test-exposure/priv/": "test", "test-exposure/plain/": "test",
	})
	inst.engine.SetRules(nil)
	inst.layer.Source.RulesChanged()
	waitReport(t, c, ns, "audit's finding cleared, the test producer's kept", func(st reportState) bool {
		return !st.has("audit-privileged/priv/c") && st.has("test-exposure/priv/") && st.has("test-exposure/plain/")
	})
	waitAlertState(t, am, ns, "audit's alert resolved, the test producer's active", map[string]string{
		"test-exposure/priv/": "test", "test-exposure/plain/": "test",
	})
}

// A result keeps its resultID when its object is evaluated again and when
// Portal restarts with a new pipeline, so Policy Reporter does not notify
// twice for one finding.
func TestResultIDStable(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "resultid")
	rules := podRule("audit-privileged", ns, privileged, "container {{ container.name }} of {{ metadata.labels?.rev ?? \"none\" }} is privileged")
	inst := startInstance(t, instanceOptions{rules: rules})
	create(t, c, pod(ns, "priv", true, nil))
	const key = "audit-privileged/priv/c"
	result := func(st reportState) (reportsv1alpha2.PolicyReportResult, bool) {
		for _, r := range st.reports {
			for _, res := range r.Results {
				if resultKey(res) == key {
					return res, true
				}
			}
		}
		return reportsv1alpha2.PolicyReportResult{}, false
	}
	st := waitReport(t, c, ns, "finding reported", func(st reportState) bool { return st.has(key) })
	first, _ := result(st)
	id := first.Properties["resultID"]
	if len(id) != 32 {
		t.Fatalf("result ID %q is not 32 hex digits", id)
	}

	// Re-evaluation with a new message: the report is rewritten, the ID stays.
	p := pod(ns, "priv", true, nil)
	if err := c.Patch(context.Background(), p, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"rev":"two"}}}`))); err != nil {
		t.Fatal(err)
	}
	st = waitReport(t, c, ns, "new message reported", func(st reportState) bool {
		res, ok := result(st)
		return ok && res.Message == "container c of two is privileged"
	})
	if res, _ := result(st); res.Properties["resultID"] != id {
		t.Errorf("result ID changed on re-evaluation: %s, then %s", id, res.Properties["resultID"])
	}

	// Restart: a new manager, a new pipeline, the reports adopted.
	// The reports are deleted, so the new instance's result comes from its
	// own evaluation, not from the report it adopted.
	inst.stop(t)
	for _, r := range st.reports {
		if err := c.Delete(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	waitReport(t, c, ns, "reports gone", func(st reportState) bool { return len(st.reports) == 0 })
	startInstance(t, instanceOptions{rules: rules})
	st = waitReport(t, c, ns, "finding reported after the restart", func(st reportState) bool { return st.has(key) })
	if res, _ := result(st); res.Properties["resultID"] != id {
		t.Errorf("result ID changed across a restart: %s, then %s", id, res.Properties["resultID"])
	}
}
