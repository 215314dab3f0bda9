package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// TestChartAllLayersWithItsRBAC installs the chart with every layer on
// (admission, audit, the WAF pipeline): Portal must run them with only the
// RBAC the chart computes, so no replica logs a forbidden error and the
// WAF layer issues its cache certificate; helm uninstall then leaves
// nothing, the WAF certificate included.
func TestChartAllLayersWithItsRBAC(t *testing.T) {
	e := newEnv(t)
	e.install(t, "audit.enabled=true", "waf.enabled=true")
	eventually(t, time.Minute, "the WAF cache certificate Secret", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Secrets(releaseNS).Get(ctx, releaseName+"-waf-cache-cert", metav1.GetOptions{})
		return err == nil, nil
	})
	pods := e.portalPods(t)
	for _, p := range pods {
		if p.Labels["portal.io/layer-waf"] != "true" || p.Labels["portal.io/layer-audit"] != "true" {
			t.Fatalf("pod %s does not run every layer: labels %v", p.Name, p.Labels)
		}
	}
	e.assertNoForbidden(t)
	e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	e.assertNothingLeft(t)
}

func testUninstall(t *testing.T, e *env) {
	ctx := context.Background()
	var rules policyv1alpha1.PortalClusterRuleList
	if err := e.c.List(ctx, &rules); err != nil {
		t.Fatal(err)
	}
	for i := range rules.Items {
		_ = e.c.Delete(ctx, &rules.Items[i])
	}
	// Watch the webhook configuration and the Deployment from now: the
	// webhook configuration must go before the Deployment does.
	whw, err := e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + releaseName})
	if err != nil {
		t.Fatal(err)
	}
	defer whw.Stop()
	depw, err := e.cs.AppsV1().Deployments(releaseNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + releaseName})
	if err != nil {
		t.Fatal(err)
	}
	defer depw.Stop()
	order := make(chan string, 4)
	forward := func(what string, ch <-chan watch.Event) {
		for ev := range ch {
			if ev.Type == watch.Deleted {
				order <- what
				return
			}
		}
	}
	go forward("webhook configuration", whw.ResultChan())
	go forward("deployment", depw.ResultChan())

	e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	var seen []string
	for len(seen) < 2 {
		select {
		case w := <-order:
			seen = append(seen, w)
		case <-time.After(time.Minute):
			t.Fatalf("deletions seen after helm uninstall: %v, want the webhook configuration and the deployment", seen)
		}
	}
	if seen[0] != "webhook configuration" {
		t.Errorf("deletion order %v: the webhook configuration must go first, or the API server calls a webhook with no pod behind it", seen)
	}
	e.assertNothingLeft(t)
}

// assertNothingLeft fails for any object of the release (besides the CRDs,
// which helm never deletes, and the namespace) still in the cluster.
func (e *env) assertNothingLeft(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName}
	var left []string
	note := func(kind string, n int, err error) {
		if err != nil {
			t.Errorf("list %s: %v", kind, err)
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%d %s", n, kind))
		}
	}
	whs, err := e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	n := 0
	if err == nil {
		for _, w := range whs.Items {
			if strings.Contains(w.Name, "portal") {
				n++
			}
		}
	}
	note("ValidatingWebhookConfigurations", n, err)
	crs, err := e.cs.RbacV1().ClusterRoles().List(ctx, sel)
	note("ClusterRoles", lenOr(crs, err), err)
	crbs, err := e.cs.RbacV1().ClusterRoleBindings().List(ctx, sel)
	note("ClusterRoleBindings", lenOr(crbs, err), err)
	// Everything in the release namespace counts, labelled or not (the
	// webhook certificate Secret and the Lease are Portal's own).
	all := metav1.ListOptions{}
	deps, err := e.cs.AppsV1().Deployments(releaseNS).List(ctx, all)
	note("Deployments", lenOr(deps, err), err)
	svcs, err := e.cs.CoreV1().Services(releaseNS).List(ctx, all)
	note("Services", lenOr(svcs, err), err)
	secs, err := e.cs.CoreV1().Secrets(releaseNS).List(ctx, all)
	note("Secrets", lenOr(secs, err), err)
	jobs, err := e.cs.BatchV1().Jobs(releaseNS).List(ctx, all)
	note("Jobs", lenOr(jobs, err), err)
	pdbs, err := e.cs.PolicyV1().PodDisruptionBudgets(releaseNS).List(ctx, all)
	note("PodDisruptionBudgets", lenOr(pdbs, err), err)
	roles, err := e.cs.RbacV1().Roles(releaseNS).List(ctx, all)
	note("Roles", lenOr(roles, err), err)
	rbs, err := e.cs.RbacV1().RoleBindings(releaseNS).List(ctx, all)
	note("RoleBindings", lenOr(rbs, err), err)
	leases, err := e.cs.CoordinationV1().Leases(releaseNS).List(ctx, all)
	note("Leases", lenOr(leases, err), err)
	sas, err := e.cs.CoreV1().ServiceAccounts(releaseNS).List(ctx, all)
	n = 0
	if err == nil {
		for _, sa := range sas.Items {
			if sa.Name != "default" {
				n++
			}
		}
	}
	note("ServiceAccounts", n, err)
	eventually(t, 2*time.Minute, "Portal's pods to be gone", func(context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(releaseNS).List(ctx, all)
		return err == nil && len(pods.Items) == 0, nil
	})
	if len(left) > 0 {
		t.Errorf("left after helm uninstall: %s", strings.Join(left, ", "))
	}
}

// lenOr is the number of items of a list, 0 when listing failed.
func lenOr(list interface{ GetListMeta() metav1.ListInterface }, err error) int {
	if err != nil {
		return 0
	}
	return meta.LenList(list.(runtime.Object))
}

// dump logs the state of Portal's namespace when the test fails.
func (e *env) dump(t testing.TB) {
	ctx := context.Background()
	pods, _ := e.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		t.Logf("pod %s: %s %v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		for _, c := range p.Spec.Containers {
			logs, err := e.cs.CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To[int64](30)}).DoRaw(ctx)
			t.Logf("logs of %s (err %v):\n%s", p.Name, err, logs)
		}
	}
	evs, _ := e.cs.CoreV1().Events(releaseNS).List(ctx, metav1.ListOptions{})
	for _, ev := range evs.Items {
		t.Logf("event %s %s: %s", ev.InvolvedObject.Name, ev.Reason, ev.Message)
	}
	// A pod the scheduler cannot place says only "untolerated taint(s)":
	// the node's taints and conditions say which (DiskPressure when the
	// machine's disk is nearly full).
	nodes, _ := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	for _, n := range nodes.Items {
		var conds []string
		for _, c := range n.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				conds = append(conds, string(c.Type)+": "+c.Message)
			}
		}
		t.Logf("node %s: taints %v; conditions true: %s", n.Name, n.Spec.Taints, strings.Join(conds, "; "))
	}
}
