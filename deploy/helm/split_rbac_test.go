package helm_test

import (
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
)

// In split mode each Deployment runs as its own ServiceAccount with only its
// layer's permissions, as the real API server's authorizer decides: a
// compromised admission pod cannot mint ServiceAccount tokens the way the
// WAF's Engine controller may, nor read what audit watches.
func TestSplitModeGivesEachLayerOnlyItsRBAC(t *testing.T) {
	c, cl := adminClient(t)
	ctx := t.Context()
	manifest, err := render(t, "", "global.mode=split", "nameOverride=split", "audit.enabled=true", "waf.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	deployments := map[string]string{} // layer -> ServiceAccount
	for _, u := range objects(t, manifest) {
		switch u.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := c.Create(ctx, u); err != nil {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			t.Cleanup(func() { _ = c.Delete(ctx, u) })
		case "Deployment":
			sa, _, _ := unstructured.NestedString(u.Object, "spec", "template", "spec", "serviceAccountName")
			deployments[u.GetLabels()["app.kubernetes.io/component"]] = sa
		}
	}
	if len(deployments) != 3 || deployments["admission"] == deployments["waf"] {
		t.Fatalf("Deployments and their ServiceAccounts %v: want admission, audit and waf, each with its own", deployments)
	}
	cs := kubernetes.NewForConfigOrDie(cl.Config)
	can := func(layer, verb, group, resource, sub string) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + releaseNS + ":" + deployments[layer],
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: "team-a", Verb: verb, Group: group, Resource: resource, Subresource: sub,
			},
		}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Status.Allowed
	}
	for _, tc := range []struct {
		layer, verb, group, resource, sub string
		want                              bool
	}{
		{"waf", "create", "", "serviceaccounts", "token", true},
		{"admission", "create", "", "serviceaccounts", "token", false},
		{"audit", "create", "", "serviceaccounts", "token", false},
		{"waf", "create", "apps", "deployments", "", true},
		{"admission", "create", "apps", "deployments", "", false},
		{"audit", "list", "", "pods", "", true},
		{"admission", "list", "", "pods", "", false},
		{"waf", "list", "", "pods", "", false},
		{"admission", "list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", true},
		{"audit", "list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", false},
		{"audit", "create", "wgpolicyk8s.io", "policyreports", "", true},
		{"admission", "create", "wgpolicyk8s.io", "policyreports", "", false},
		// Every layer loads rules.
		{"waf", "watch", "portal.io", "portalclusterrules", "", true},
	} {
		t.Run(fmt.Sprintf("%s %s %s/%s", tc.layer, tc.verb, tc.resource, tc.sub), func(t *testing.T) {
			if got := can(tc.layer, tc.verb, tc.group, tc.resource, tc.sub); got != tc.want {
				t.Errorf("the %s Deployment's ServiceAccount may %s %s %s/%s: %v, want %v", tc.layer, tc.verb, tc.group, tc.resource, tc.sub, got, tc.want)
			}
		})
	}
}
