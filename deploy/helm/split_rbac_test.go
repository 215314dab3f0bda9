package helm_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// access is one question to the API server's authorizer: may the
// ServiceAccount of who (a layer's Deployment, or "uninstall" for the hook
// Job) do verb on group/resource/sub, named name, in namespace ns ("" for
// cluster-scoped)?
type access struct {
	who, verb, group, resource, sub, ns, name string
	want                                      bool
}

// applyRBAC creates the render's ServiceAccounts and RBAC, hook objects
// included, and returns the ServiceAccount of each Deployment and
// DaemonSet by its component label and of the uninstall Job as "uninstall".
func applyRBAC(t *testing.T, manifest []byte) map[string]string {
	t.Helper()
	c, _ := adminClient(t)
	ctx := t.Context()
	sas := map[string]string{}
	for _, u := range objects(t, manifest) {
		switch u.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := c.Create(ctx, u); err != nil {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			// Not ctx: a test's context is cancelled before its cleanups run.
			t.Cleanup(func() { _ = c.Delete(context.Background(), u) })
		case "Deployment", "Job", "DaemonSet":
			sa, _, _ := unstructured.NestedString(u.Object, "spec", "template", "spec", "serviceAccountName")
			sas[u.GetLabels()["app.kubernetes.io/component"]] = sa
		}
	}
	return sas
}

// checkAccess asks the real API server each question with a
// SubjectAccessReview. The authorizer reads RBAC through informers, so a
// grant just created may not be in force yet: a question whose answer
// should be yes is asked until it is (within a deadline), and the ones
// whose answer should be no are asked after all of those, when the objects
// they sit beside are in force.
func checkAccess(t *testing.T, sas map[string]string, questions []access) {
	t.Helper()
	_, cl := adminClient(t)
	cs := kubernetes.NewForConfigOrDie(cl.Config)
	ordered := slices.SortedStableFunc(slices.Values(questions), func(a, b access) int {
		return cmp.Compare(btoi(b.want), btoi(a.want))
	})
	for _, q := range ordered {
		what := fmt.Sprintf("%s %s %s/%s %s in %q", q.who, q.verb, q.resource, q.sub, q.name, q.ns)
		t.Run(what, func(t *testing.T) {
			sa := sas[q.who]
			if sa == "" {
				t.Fatalf("the render has no %s ServiceAccount: %v", q.who, sas)
			}
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + releaseNS + ":" + sa,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: q.ns, Verb: q.verb, Group: q.group, Resource: q.resource, Subresource: q.sub, Name: q.name,
				},
			}}
			var allowed bool
			err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
				got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					return false, err
				}
				allowed = got.Status.Allowed
				return allowed || !q.want, nil
			})
			if err != nil && !wait.Interrupted(err) {
				t.Fatal(err)
			}
			if allowed != q.want {
				t.Errorf("%s (ServiceAccount %s): allowed %v, want %v", what, sa, allowed, q.want)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// In split mode each Deployment runs as its own ServiceAccount with only its
// layer's permissions, as the real API server's authorizer decides: a
// compromised admission pod cannot mint ServiceAccount tokens the way the
// WAF's Engine controller may, nor scale Portal's Deployments the way the
// uninstall hook does. Admission does read watchedGvks, as audit does: its
// rules' cluster.<kind> lookups list and watch them in the admission pods.
func TestSplitModeGivesEachLayerOnlyItsRBAC(t *testing.T) {
	manifest, err := render(t, "", "global.mode=split", "nameOverride=split", "audit.enabled=true", "waf.enabled=true", "network.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	sas := applyRBAC(t, manifest)
	if len(sas) != 5 || sas["admission"] == sas["waf"] || sas["uninstall"] == sas["admission"] {
		t.Fatalf("Deployments, the hook and their ServiceAccounts %v: want admission, audit, network, waf and uninstall, each with its own", sas)
	}
	const team = "team-a"
	deployment, lease, cert := "portal-split-admission", "portal-split-admission", "portal-split-webhook-cert"
	q := []access{
		{"waf", "create", "", "serviceaccounts", "token", team, "", true},
		{"admission", "create", "", "serviceaccounts", "token", team, "", false},
		{"audit", "create", "", "serviceaccounts", "token", team, "", false},
		{"network", "create", "", "serviceaccounts", "token", team, "", false},
		{"waf", "create", "apps", "deployments", "", team, "", true},
		{"admission", "create", "apps", "deployments", "", team, "", false},
		{"audit", "list", "", "pods", "", team, "", true},
		{"network", "list", "", "pods", "", team, "", true},
		{"waf", "list", "", "pods", "", team, "", false},
		// Admission rules' cluster.<kind> lookups read the kinds of
		// watchedGvks through informers in the admission pods.
		{"admission", "list", "", "pods", "", team, "", true},
		{"admission", "watch", "policy", "poddisruptionbudgets", "", "", "", true},
		{"admission", "list", "policy", "poddisruptionbudgets", "", team, "", true},
		{"audit", "watch", "policy", "poddisruptionbudgets", "", "", "", true},
		{"waf", "watch", "policy", "poddisruptionbudgets", "", "", "", false},
		{"admission", "list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "", true},
		{"audit", "list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "", false},
		{"network", "list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "", false},
		{"audit", "create", "wgpolicyk8s.io", "policyreports", "", team, "", true},
		{"network", "create", "wgpolicyk8s.io", "policyreports", "", team, "", true},
		{"admission", "create", "wgpolicyk8s.io", "policyreports", "", team, "", false},
		{"waf", "create", "wgpolicyk8s.io", "policyreports", "", team, "", false},
		// Every layer loads rules, writes their status and its Events.
		{"waf", "watch", "portal.io", "portalclusterrules", "", "", "", true},
		{"audit", "patch", "portal.io", "portalrules", "status", team, "", true},
		{"network", "create", "", "events", "", team, "", true},
		// Namespaces: admission's break-glass annotation, the analyser's
		// model and the WAF's route attachment; audit reads none.
		{"admission", "watch", "", "namespaces", "", "", "", true},
		{"network", "watch", "", "namespaces", "", "", "", true},
		{"waf", "watch", "", "namespaces", "", "", "", true},
		{"audit", "watch", "", "namespaces", "", "", "", false},
		// The uninstall hook's rights are the hook's alone.
		{"uninstall", "patch", "apps", "deployments", "", releaseNS, deployment, true},
		{"uninstall", "delete", "coordination.k8s.io", "leases", "", releaseNS, lease, true},
		{"uninstall", "delete", "", "secrets", "", releaseNS, cert, true},
		{"uninstall", "delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "portal-split", true},
		{"uninstall", "patch", "apps", "deployments", "", releaseNS, "other", false},
		{"admission", "patch", "apps", "deployments", "scale", releaseNS, deployment, false},
		{"admission", "patch", "apps", "deployments", "", releaseNS, deployment, false},
		{"admission", "delete", "coordination.k8s.io", "leases", "", releaseNS, lease, false},
		{"audit", "patch", "apps", "deployments", "scale", releaseNS, "portal-split-audit", false},
		{"admission", "list", "", "pods", "", releaseNS, "", true},
	}
	checkAccess(t, sas, q)
}

// In single mode too, Portal's ServiceAccount cannot scale Portal's
// Deployment nor delete its Leases: the uninstall hook runs as its own. With
// admission alone (audit off) it still reads watchedGvks, for lookups.
func TestSingleModeLeavesUninstallRightsToTheHook(t *testing.T) {
	manifest, err := render(t, "", "nameOverride=single")
	if err != nil {
		t.Fatal(err)
	}
	sas := applyRBAC(t, manifest)
	if sas["portal"] == "" || sas["uninstall"] == sas["portal"] {
		t.Fatalf("the Deployment, the hook and their ServiceAccounts %v: want portal and uninstall, each with its own", sas)
	}
	checkAccess(t, sas, []access{
		{"uninstall", "patch", "apps", "deployments", "", releaseNS, "portal-single", true},
		{"portal", "patch", "apps", "deployments", "scale", releaseNS, "portal-single", false},
		{"portal", "patch", "apps", "deployments", "", releaseNS, "portal-single", false},
		{"portal", "delete", "coordination.k8s.io", "leases", "", releaseNS, "portal-single", false},
		{"portal", "list", "", "pods", "", releaseNS, "", true},
		{"portal", "watch", "policy", "poddisruptionbudgets", "", "", "", true},
		{"portal", "watch", "", "namespaces", "", "", "", true},
	})
}
