package chart

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// testRestartNoDuplicateAlert turns audit on with a real Alertmanager that
// forwards its notifications to a webhook receiver, raises an alert, and
// restarts every replica (so the leader changes): the new leader re-sends
// the open alert, which Alertmanager must see as the same alert. A
// duplicate shows as a second label set or startsAt for the same finding,
// or as the alert resolving and firing again; each is a notification to
// whoever is on call.
func testRestartNoDuplicateAlert(t *testing.T, e *env) {
	ctx := context.Background()
	recv := amtest.NewReceiver(t)
	am := amtest.StartWith(t, amtest.Options{Host: devcluster.NodeIP, WebhookURL: recv.URL()})
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	e.rollWith(t, func() {
		e.helm(t, "upgrade", releaseName, filepath.Join(root, "deploy", "helm", "portal"), "--namespace", releaseNS,
			"--reuse-values", "--set", "audit.enabled=true", "--set", "audit.alertmanagerURL="+am.URL(), "--wait", "--timeout", "4m")
	})
	e.rule(t, "e2e-alert", "warn", "e2e-alert")
	alerting := func(name string) {
		t.Helper()
		pod := testPod(name, map[string]string{"e2e-alert": "true"}, false)
		// The rule reaches the replicas independently: a create before
		// it is admitted without a warning, and audit reports the pod all
		// the same.
		if _, err := e.cs.CoreV1().Pods(e.workload).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { _ = e.cs.CoreV1().Pods(e.workload).Delete(context.Background(), name, metav1.DeleteOptions{}) })
		eventually(t, 2*time.Minute, "a firing notification for "+name, func(context.Context) (bool, error) {
			return slices.ContainsFunc(recv.Notifications(), func(n amtest.Notification) bool {
				return slices.ContainsFunc(n.Alerts, func(a amtest.NotifiedAlert) bool {
					return a.Status == "firing" && a.Labels["rule"] == "e2e-alert" && a.Labels["name"] == name
				})
			}), nil
		})
	}
	alerting("alerting-before")
	before, err := am.Alerts(e.workload)
	if err != nil {
		t.Fatal(err)
	}

	holder, _ := e.leader(t)
	e.rollWith(t, func() {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"portal.io/e2e-restarted-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
		if _, err := e.cs.AppsV1().Deployments(releaseNS).Patch(ctx, releaseName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	// The new leader publishes the full state to its sinks
	// (portal_audit_leader 1) and so re-sends the open alert; an alert
	// raised after that reaches Alertmanager behind it, so once that one is
	// notified, whatever the re-sent alert caused was notified too.
	eventually(t, time.Minute, "a new leader with its sinks started", func(context.Context) (bool, error) {
		h, n := e.leader(t)
		return n == 1 && h != holder && e.scrapeSeries(t, "portal_audit_leader")[holderPod(h)] == 1, nil
	})
	alerting("alerting-after")

	type seen struct{ labels, startsAt map[string]bool }
	byFinding := map[string]*seen{}
	for _, n := range recv.Notifications() {
		for _, a := range n.Alerts {
			if a.Labels["rule"] != "e2e-alert" {
				continue
			}
			if a.Status != "firing" {
				t.Errorf("notified %s for %s while its finding stayed open: %+v", a.Status, a.Labels["name"], a.Labels)
			}
			// One finding: one rule on one container of one object, from
			// one producer (audit, or admission's warn verdicts).
			finding := a.Labels["name"] + "/" + a.Labels["container"] + " (" + a.Labels["producer"] + ")"
			s := byFinding[finding]
			if s == nil {
				s = &seen{labels: map[string]bool{}, startsAt: map[string]bool{}}
				byFinding[finding] = s
			}
			s.labels[fmt.Sprint(a.Labels)] = true
			s.startsAt[a.StartsAt.UTC().Format(time.RFC3339Nano)] = true
		}
	}
	for name, s := range byFinding {
		if len(s.labels) != 1 || len(s.startsAt) != 1 {
			t.Errorf("the finding on %s was notified as %d alerts (label sets %v, startsAt %v), want one across the restart",
				name, max(len(s.labels), len(s.startsAt)), keys(s.labels), keys(s.startsAt))
		}
	}
	after, err := am.Alerts(e.workload)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range before {
		i := slices.IndexFunc(after, func(a amtest.Alert) bool { return a.Fingerprint == b.Fingerprint })
		switch {
		case i < 0:
			t.Errorf("the alert %v is gone from Alertmanager after the restart", b.Labels)
		case !after[i].StartsAt.Equal(b.StartsAt):
			t.Errorf("the alert %v started again after the restart: startsAt %s, was %s", b.Labels, after[i].StartsAt, b.StartsAt)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// rollWith runs change, which rolls the Deployment, and waits until every
// replica was replaced by a ready one.
func (e *env) rollWith(t *testing.T, change func()) {
	t.Helper()
	old := map[string]bool{}
	for _, p := range e.portalPods(t) {
		old[p.Name] = true
	}
	change()
	eventually(t, 3*time.Minute, "every replica replaced", func(context.Context) (bool, error) {
		pods := e.portalPods(t)
		for _, p := range pods {
			if old[p.Name] || !podReady(p) {
				return false, nil
			}
		}
		return len(pods) == 2, nil
	})
}
