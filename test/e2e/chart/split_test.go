package chart

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/devcluster"
)

// splitLayers are the Deployments global.mode=split renders for the
// layers TestChartSplitMode enables, each <release>-<layer>.
var splitLayers = []string{"admission", "audit", "network", "waf"}

// TestChartSplitMode installs the chart with one Deployment per layer
// (admission, audit, network, waf): each runs with only the chart's RBAC,
// becomes Ready, holds its own Lease, and does its layer's job; helm
// uninstall then leaves nothing.
func TestChartSplitMode(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	// The object audit must find exists before the rule does: admission
	// would refuse it afterwards.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flagged", Namespace: e.workload, Labels: map[string]string{"e2e-split": "true"}}}
	if err := e.c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	e.installSplit(t, splitLayers, 2, "audit.reportFormat=both", "audit.installOpenReportsCRDs=true")

	t.Run("EveryDeploymentReady", func(t *testing.T) {
		for _, l := range splitLayers {
			d, err := e.cs.AppsV1().Deployments(releaseNS).Get(ctx, releaseName+"-"+l, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the %s Deployment: %v", l, err)
			}
			if d.Status.ReadyReplicas != 2 {
				t.Errorf("%s: %d ready replicas, want 2", d.Name, d.Status.ReadyReplicas)
			}
		}
	})

	t.Run("AdmissionDeniesThroughService", func(t *testing.T) {
		e.rule(t, "e2e-split-deny", "deny", "e2e-deny")
		consistently(t, "the privileged pod denied by both admission replicas", 10, func() (bool, string) {
			err := e.createDry(e.workload, testPod("root", map[string]string{"e2e-deny": "true"}, true))
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "e2e-split-deny violated"), fmt.Sprint(err)
		})
	})

	t.Run("AuditWritesPolicyReport", func(t *testing.T) {
		r := &policyv1alpha1.PortalClusterRule{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-split-audit"},
			Spec: policyv1alpha1.RuleSpec{
				Severity: "high",
				Mode:     []policyv1alpha1.Mode{"audit"},
				Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Group: "", Kind: "ConfigMap"}}},
				Rule:     `metadata.labels["e2e-split"] == "true"`,
				Message:  "e2e-split-audit violated",
			},
		}
		if err := e.c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.c.Delete(context.Background(), r) })
		reports := e.reportsClient(t)
		names := func(o corev1.ObjectReference) bool { return o.Name == cm.Name }
		eventually(t, 2*time.Minute, "a PolicyReport result of e2e-split-audit on ConfigMap flagged", func(ctx context.Context) (bool, error) {
			var l reportsv1alpha2.PolicyReportList
			if err := reports.List(ctx, &l, client.InNamespace(e.workload)); err != nil {
				return false, err
			}
			for _, rep := range l.Items {
				for _, res := range rep.Results {
					if res.Policy == r.Name && slices.ContainsFunc(res.Resources, names) {
						return true, nil
					}
				}
			}
			return false, nil
		})
		// audit.reportFormat=both with the chart's openreports.io CRDs.
		eventually(t, time.Minute, "an openreports.io Report result of e2e-split-audit on ConfigMap flagged", func(ctx context.Context) (bool, error) {
			var l openreportsv1alpha1.ReportList
			if err := reports.List(ctx, &l, client.InNamespace(e.workload)); err != nil {
				return false, err
			}
			for _, rep := range l.Items {
				for _, res := range rep.Results {
					if res.Policy == r.Name && slices.ContainsFunc(res.Subjects, names) {
						return true, nil
					}
				}
			}
			return false, nil
		})
	})

	t.Run("OneLeaseHolderPerLayer", func(t *testing.T) {
		ls, err := e.cs.CoordinationV1().Leases(releaseNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]string{}
		for _, l := range ls.Items {
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				held[l.Name] = holderPod(*l.Spec.HolderIdentity)
			}
		}
		if len(held) != len(splitLayers) {
			t.Errorf("held Leases %v, want one per Deployment %v", held, splitLayers)
		}
		for _, l := range splitLayers {
			name := releaseName + "-" + l
			holder, ok := held[name]
			if !ok {
				t.Errorf("no held Lease %s for the %s Deployment", name, l)
				continue
			}
			pod, err := e.cs.CoreV1().Pods(releaseNS).Get(ctx, holder, metav1.GetOptions{})
			if err != nil {
				t.Errorf("the holder of Lease %s, %s: %v", name, holder, err)
				continue
			}
			if pod.Labels["app.kubernetes.io/component"] != l {
				t.Errorf("Lease %s is held by %s, a pod of component %q: each layer elects its own leader", name, holder, pod.Labels["app.kubernetes.io/component"])
			}
		}
	})

	t.Run("NoForbiddenErrors", func(t *testing.T) {
		e.assertNoForbidden(t)
	})

	t.Run("UninstallLeavesNothing", func(t *testing.T) {
		e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
		e.assertNothingLeft(t)
		// Kept, as crds/ are: deleting Portal deletes nobody's reports.
		for _, crd := range []string{"reports.openreports.io", "clusterreports.openreports.io"} {
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
			if err := e.c.Get(context.Background(), client.ObjectKey{Name: crd}, obj); err != nil {
				t.Errorf("CRD %s after helm uninstall: %v, want it kept", crd, err)
			}
		}
	})
}

// installSplit installs the chart in split mode with the given layers
// (admission is on by default), replicas pods for each layer's Deployment
// and the values of set, and waits for every one of them to be ready.
func (e *env) installSplit(t testing.TB, layers []string, replicas int, set ...string) {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"install", releaseName, filepath.Join(root, "deploy", "helm", "portal"),
		"--namespace", releaseNS, "--create-namespace", "--wait", "--timeout", "4m"}
	set = append(append(imageValues(), set...), "global.mode=split", "networkPolicy.webhookFromAnywhere=true",
		// Up to eight pods on one node: small requests so they fit.
		"resources.requests.cpu=20m", "resources.requests.memory=64Mi")
	for _, l := range layers {
		set = append(set, fmt.Sprintf("%s.enabled=true", l), fmt.Sprintf("%s.replicaCount=%d", l, replicas))
	}
	for _, v := range set {
		args = append(args, "--set", v)
	}
	t.Cleanup(func() {
		// A failed step leaves the release: the next test installs its own.
		_, _ = e.helmQuiet("uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	})
	e.helm(t, args...)
	eventually(t, 2*time.Minute, fmt.Sprintf("%d ready replicas of every layer", replicas), func(ctx context.Context) (bool, error) {
		for _, l := range layers {
			pods, err := e.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{
				"app.kubernetes.io/instance": releaseName, "app.kubernetes.io/component": l}.String()})
			if err != nil {
				return false, err
			}
			ready := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && podReady(p) {
					ready++
				}
			}
			if ready != replicas || len(pods.Items) != replicas {
				return false, nil
			}
		}
		return true, nil
	})
}

// rbacForbidden is how the API server words an authorization refusal
// (`pods is forbidden: User "system:serviceaccount:..." cannot list ...`).
// Matching it, not the bare word, keeps admission denials whose rule
// messages say "forbidden" out of the check.
const rbacForbidden = "is forbidden: User "

// assertNoForbidden fails for every line of a Portal pod's log that
// reports a forbidden error: the chart's RBAC misses a permission.
func (e *env) assertNoForbidden(t testing.TB) {
	t.Helper()
	for _, p := range e.portalPods(t) {
		logs, err := e.cs.CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			t.Fatalf("logs of %s: %v", p.Name, err)
		}
		for _, line := range strings.Split(string(logs), "\n") {
			if strings.Contains(line, rbacForbidden) {
				t.Errorf("%s logged a forbidden error with the chart's RBAC: %s", p.Name, line)
			}
		}
	}
}

// helmQuiet runs helm and returns its output and error, for cleanups that
// must not fail the test a second time.
func (e *env) helmQuiet(args ...string) (string, error) {
	out, err := exec.Command(helmPath, append(args, "--kubeconfig", e.kubeconfig)...).CombinedOutput()
	return string(out), err
}

// reportsClient is a client that knows the wgpolicyk8s.io
// and openreports.io report kinds, which Portal's manager scheme leaves to
// the report sink.
func (e *env) reportsClient(t testing.TB) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{reportsv1alpha2.AddToScheme, openreportsv1alpha1.Install} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(e.cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
