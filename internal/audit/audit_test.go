package audit_test

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
	"github.com/vilaca/portal/internal/sink/policyreport"
)

// A pod that existed before Portal started is reported; a violating pod
// created after start appears in its namespace's PolicyReport and as an
// Alertmanager alert; fixing it and deleting it clear the report results
// and resolve the alerts. A cluster-scoped finding goes to the
// ClusterPolicyReport.
func TestFindingLifecycle(t *testing.T) {
	c := cluster(t)
	am := shared(t)
	ns := namespace(t, c, "life")
	rules := podRule("audit-team-label", ns, "metadata.labels?.team == nil", "pod {{ metadata.name }} has no team label") +
		podRule("audit-privileged", ns, privileged, "container {{ container.name }} is privileged") +
		namespaceOwnerRule("audit-namespace-owner", ns)
	create(t, c, pod(ns, "before", false, nil))
	var goneMu sync.Mutex
	var gone []string
	inst := startInstance(t, instanceOptions{rules: rules, am: am, gone: func(gvk schema.GroupVersionKind, namespace, name string) {
		goneMu.Lock()
		defer goneMu.Unlock()
		gone = append(gone, gvk.Kind+" "+namespace+"/"+name)
	}})

	waitReport(t, c, ns, "pre-existing pod reported", func(st reportState) bool { return st.has("audit-team-label/before/") })

	created := time.Now()
	create(t, c, pod(ns, "bad", true, nil))
	waitReport(t, c, ns, "new pod reported", func(st reportState) bool {
		return st.has("audit-team-label/bad/") && st.has("audit-privileged/bad/c")
	})
	t.Logf("event to report (as seen by polling): %v", time.Since(created))
	waitAlerts(t, am, ns, "alerts fire", func(a map[string]int) bool {
		return a["audit-team-label/bad/"] == 1 && a["audit-privileged/bad/c"] == 1 && a["audit-team-label/before/"] == 1
	})
	t.Logf("event to alert (as seen by polling): %v", time.Since(created))
	checkAlertShape(t, am, ns)

	patch := client.MergeFrom(pod(ns, "bad", true, nil))
	fixed := pod(ns, "bad", true, map[string]string{"team": "a"})
	if err := c.Patch(context.Background(), fixed, client.RawPatch(patch.Type(), []byte(`{"metadata":{"labels":{"team":"a"}}}`))); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, ns, "fixed finding cleared", func(st reportState) bool {
		return !st.has("audit-team-label/bad/") && st.has("audit-privileged/bad/c")
	})
	waitAlerts(t, am, ns, "fixed alert resolved", func(a map[string]int) bool {
		return a["audit-team-label/bad/"] == 0 && a["audit-privileged/bad/c"] == 1
	})

	if err := c.Delete(context.Background(), pod(ns, "bad", true, nil)); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, ns, "deleted pod cleared", func(st reportState) bool {
		return !st.has("audit-privileged/bad/c") && st.has("audit-team-label/before/")
	})
	waitAlerts(t, am, ns, "deleted pod's alert resolved", func(a map[string]int) bool {
		return a["audit-privileged/bad/c"] == 0 && a["audit-team-label/before/"] == 1
	})
	// The lookup layer hears of the deletion, to drop the pod's pending
	// re-evaluations.
	eventually(t, 30*time.Second, "Options.Gone hears of the deleted pod", func() (bool, error) {
		goneMu.Lock()
		defer goneMu.Unlock()
		return slices.Contains(gone, "Pod "+ns+"/bad"), nil
	})

	// Cluster-scoped: a Namespace without an owner label.
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-cl", Labels: map[string]string{"portal-test": ns}}})
	waitCluster(t, c, "namespace finding in the ClusterPolicyReport", func(keys map[string]int) bool {
		return keys["audit-namespace-owner/"+ns+"-cl/"] == 1
	})
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-cl"}}
	if err := c.Patch(context.Background(), nsObj, client.RawPatch(patch.Type(), []byte(`{"metadata":{"labels":{"owner":"me"}}}`))); err != nil {
		t.Fatal(err)
	}
	waitCluster(t, c, "namespace finding cleared", func(keys map[string]int) bool {
		return keys["audit-namespace-owner/"+ns+"-cl/"] == 0
	})

	if n := inst.metric(t, "portal_audit_event_to_report_seconds", map[string]string{"sink": "policyreport"}); n == 0 {
		t.Error("portal_audit_event_to_report_seconds{sink=policyreport} has no samples")
	}
	if n := inst.metric(t, "portal_audit_event_to_report_seconds", map[string]string{"sink": "alertmanager"}); n == 0 {
		t.Error("portal_audit_event_to_report_seconds{sink=alertmanager} has no samples")
	}
	if n := inst.metric(t, "portal_audit_violations", map[string]string{"namespace": ns, "rule": "audit-team-label", "severity": "critical"}); n != 1 {
		t.Errorf("portal_audit_violations{rule=audit-team-label,namespace=%s} = %v, want 1", ns, n)
	}
}

// checkAlertShape checks the labels and annotations of the privileged alert.
func checkAlertShape(t *testing.T, am *amtest.Server, ns string) {
	t.Helper()
	as, err := am.Alerts(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Labels["rule"] != "audit-privileged" {
			continue
		}
		want := map[string]string{"alertname": "PortalViolation", "rule": "audit-privileged", "severity": "critical",
			"namespace": ns, "kind": "Pod", "name": "bad", "container": "c", "producer": "audit"}
		for k, v := range want {
			if a.Labels[k] != v {
				t.Errorf("alert label %s = %q, want %q (labels %v)", k, a.Labels[k], v, a.Labels)
			}
		}
		if a.Annotations["message"] != "container c is privileged" {
			t.Errorf("alert message = %q", a.Annotations["message"])
		}
		if a.StartsAt.IsZero() || time.Since(a.StartsAt) > time.Minute {
			t.Errorf("alert startsAt = %v", a.StartsAt)
		}
		return
	}
	t.Errorf("no audit-privileged alert in %v", as)
}

func waitReport(t *testing.T, c client.Client, ns, what string, cond func(reportState) bool) reportState {
	t.Helper()
	var st reportState
	eventually(t, 30*time.Second, what, func() (bool, error) {
		var err error
		st, err = readReports(t, c, ns)
		return err == nil && cond(st), err
	})
	checkReports(t, st)
	return st
}

func waitAlerts(t *testing.T, am *amtest.Server, ns, what string, cond func(map[string]int) bool) {
	t.Helper()
	var last map[string]int
	eventually(t, 30*time.Second, what, func() (bool, error) {
		a, err := am.AlertKeys(ns)
		if err != nil {
			return false, nil
		}
		last = a
		return cond(a), nil
	})
	for k, n := range last {
		if n != 1 {
			t.Errorf("alert %s is in Alertmanager %d times", k, n)
		}
	}
}

func waitCluster(t *testing.T, c client.Client, what string, cond func(map[string]int) bool) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() (bool, error) {
		var l reportsv1alpha2.ClusterPolicyReportList
		if err := c.List(context.Background(), &l); err != nil {
			return false, err
		}
		keys := map[string]int{}
		for _, r := range l.Items {
			if !strings.HasPrefix(r.Name, "portal") {
				continue
			}
			for _, res := range r.Results {
				keys[resultKey(res)]++
			}
		}
		return cond(keys), nil
	})
}

// With both report formats, the same findings go to wgpolicyk8s.io
// PolicyReports and openreports.io Reports, and clear from both. Each
// result carries its rule's category, which Policy Reporter groups by.
func TestOpenReports(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "openrep")
	const category = "Pod Security Standards (Baseline)"
	rule := strings.TrimSuffix(podRule("audit-privileged", ns, privileged, "container {{ container.name }} is privileged"), "---") +
		"category: " + category + "\n---"
	startInstance(t, instanceOptions{
		rules:   rule,
		formats: []string{policyreport.FormatWGPolicy, policyreport.FormatOpenReports},
	})
	create(t, c, pod(ns, "p", true, nil))
	waitReport(t, c, ns, "PolicyReport", func(st reportState) bool { return st.has("audit-privileged/p/c") })
	openReport := func() (*openreportsv1alpha1.Report, error) {
		var r openreportsv1alpha1.Report
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: policyreport.ReportName}, &r)
		return &r, err
	}
	eventually(t, 30*time.Second, "OpenReports Report", func() (bool, error) {
		r, err := openReport()
		return err == nil && len(r.Results) == 1 && r.Summary.Fail == 1, nil
	})
	r, _ := openReport()
	res := r.Results[0]
	if r.Source != "portal" || res.Source != "portal-audit" || len(res.Properties["resultID"]) != 32 ||
		res.Policy != "audit-privileged" || res.Result != "fail" || res.Properties["container"] != "c" || res.Category != category ||
		len(res.Subjects) != 1 || res.Subjects[0].Name != "p" || r.Labels[policyreport.LabelShard] != "0" {
		t.Errorf("report %+v", r)
	}
	var pr reportsv1alpha2.PolicyReport
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: policyreport.ReportName}, &pr); err != nil {
		t.Fatal(err)
	}
	if len(pr.Results) != 1 || pr.Results[0].Category != category {
		t.Errorf("PolicyReport results %+v, want one of category %q", pr.Results, category)
	}
	if err := c.Delete(context.Background(), pod(ns, "p", true, nil)); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, ns, "PolicyReport cleared", func(st reportState) bool { return len(st.reports) == 0 })
	eventually(t, 30*time.Second, "Report cleared", func() (bool, error) {
		_, err := openReport()
		return apierrors.IsNotFound(err), nil
	})
}

// TestFakeReportsAreNotAdopted: a tenant who may create PolicyReports labels
// two in its namespace as Portal's before Portal starts: one numbered shard
// 10,000,000 (the leader allocated 403 MiB adopting it, and a larger number
// ran it out of memory) and one listing an object of another namespace (it
// moved that namespace's finding into shard 3). Portal adopts neither: its
// heap stays small, and the victim's finding is in the victim's first report.
func TestFakeReportsAreNotAdopted(t *testing.T) {
	c := cluster(t)
	tenant := namespace(t, c, "fake-reports")
	victim := namespace(t, c, "fake-victim")
	fake := func(name, shard string, subjectNS string) *reportsv1alpha2.PolicyReport {
		return &reportsv1alpha2.PolicyReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: name, Labels: map[string]string{
				policyreport.LabelManagedBy: policyreport.ManagedBy, policyreport.LabelShard: shard}},
			Results: []reportsv1alpha2.PolicyReportResult{{Policy: "audit-privileged", Result: "fail",
				Resources: []corev1.ObjectReference{{APIVersion: "v1", Kind: "Pod", Namespace: subjectNS, Name: "p"}}}},
		}
	}
	create(t, c, fake("portal-10000000", "10000000", tenant), fake("portal-3", "3", victim), pod(victim, "p", true, nil))
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	startInstance(t, instanceOptions{rules: podRule("audit-privileged", victim, privileged, "container {{ container.name }} is privileged")})
	st := waitReport(t, c, victim, "the victim's finding reported", func(st reportState) bool { return st.has("audit-privileged/p/c") })
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 200<<20 {
		t.Errorf("Portal allocated %d MiB starting up beside the fake reports, want far less than the 403 MiB the fake shard costs", grew>>20)
	}
	for _, r := range st.reports {
		if r.Name != policyreport.ReportName {
			t.Errorf("the victim's finding is in report %s, want %s: a fake report in %s placed it", r.Name, policyreport.ReportName, tenant)
		}
	}
}

// TestTwoWritersKeepToTheirOwnReports: two instances that write reports at
// once (the split Deployments of audit and network, an audit log reader on
// each control-plane node) keep their findings in reports of their own,
// also when one restarts and adopts the reports it finds. With one name for
// both, each rewrote the other's report with its own findings.
func TestTwoWritersKeepToTheirOwnReports(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "two-writers")
	create(t, c, pod(ns, "p", true, nil))
	a := instanceOptions{rules: podRule("writer-a", ns, privileged, "a")}
	b := instanceOptions{rules: podRule("writer-b", ns, privileged, "b"), reportName: "portal-network"}
	first := startInstance(t, a)
	startInstance(t, b)
	inOwnReports := func(pods ...string) func(reportState) bool {
		return func(st reportState) bool {
			for _, p := range pods {
				if reportOf(st, "writer-a/"+p+"/c") != policyreport.ReportName || reportOf(st, "writer-b/"+p+"/c") != "portal-network" {
					return false
				}
			}
			return len(st.reports) == 2
		}
	}
	waitReport(t, c, ns, "each writer's finding in its own report", inOwnReports("p"))
	first.stop(t)
	create(t, c, pod(ns, "q", true, nil))
	startInstance(t, a)
	waitReport(t, c, ns, "a restarted writer adopting only its own report", inOwnReports("p", "q"))
}

// reportOf names the report that lists the result key, "" when none does.
func reportOf(st reportState, key string) string {
	for _, r := range st.reports {
		for _, res := range r.Results {
			if resultKey(res) == key {
				return r.Name
			}
		}
	}
	return ""
}
