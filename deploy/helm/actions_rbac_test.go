package helm_test

import (
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vilaca/portal/internal/actions"
)

// TestChartGrantsEachActionItsPermissions: with one response action
// enabled in Helm, the chart grants Portal's ServiceAccount every
// permission that action needs, the ones its ActionsReady condition
// checks: enabling an action in the chart never leaves it reported as
// lacking RBAC.
func TestChartGrantsEachActionItsPermissions(t *testing.T) {
	c, cl := adminClient(t)
	cs, err := kubernetes.NewForConfig(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	for value, typ := range map[string]string{
		"label": "label", "annotate": "annotate", "evict": "evict",
		"patchNetworkPolicy": "patch-networkpolicy", "revokeToken": "revoke-sa-token",
	} {
		t.Run(typ, func(t *testing.T) {
			perms, ok := actions.Permissions(typ)
			if !ok {
				t.Fatalf("no action type %q", typ)
			}
			name := "rbac-" + strings.ToLower(value)
			manifest, err := render(t, "", "audit.enabled=true", "actions."+value+".enabled=true", "fullnameOverride="+name)
			if err != nil {
				t.Fatal(err)
			}
			sa := ""
			for _, u := range objects(t, manifest) {
				switch u.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
					if err := c.Create(t.Context(), u); err != nil {
						t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
					}
					t.Cleanup(func() { _ = c.Delete(t.Context(), u) })
					if u.GetKind() == "ServiceAccount" && u.GetName() == name {
						sa = u.GetName()
					}
				}
			}
			if sa == "" {
				t.Fatalf("the chart renders no ServiceAccount %s", name)
			}
			user := "system:serviceaccount:" + releaseNS + ":" + sa
			for _, p := range perms {
				review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS}, ResourceAttributes: &p}}
				got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), review, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !got.Status.Allowed {
					what := strings.TrimSuffix(p.Resource+"/"+p.Subresource, "/")
					if p.Group != "" {
						what += "." + p.Group
					}
					t.Errorf("the chart does not grant %s on %s to %s", p.Verb, what, user)
				}
			}
		})
	}
}
