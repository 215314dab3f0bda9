package rule_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// TestCategoryColumnAndBounds: `kubectl get portalclusterrules` shows a
// rule's category in its CATEGORY column (the table the API server serves
// kubectl), the loaded rule carries it to reports and alerts, and the API
// server refuses a category that is not a short printable name.
func TestCategoryColumnAndBounds(t *testing.T) {
	cl := shared.Cluster(t)
	ctx := context.Background()
	const category = "Pod Security Standards (Baseline)"
	pcr := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: "category-column"},
		Spec: policyv1alpha1.RuleSpec{
			Category: category,
			Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}},
			Rule:     "container.securityContext.privileged == true",
		},
	}
	if err := env.client.Create(ctx, pcr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pcr) })

	hc, err := rest.HTTPClientFor(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cl.Config.Host, "/")+"/apis/portal.io/v1alpha1/portalclusterrules/"+pcr.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", req.URL, resp.StatusCode, body, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, c := range table.ColumnDefinitions {
		if c.Name == "Category" {
			col = i
		}
	}
	if col < 0 || len(table.Rows) != 1 || len(table.Rows[0].Cells) <= col || table.Rows[0].Cells[col] != category {
		t.Fatalf("kubectl get shows no category %q: columns %+v, rows %+v", category, table.ColumnDefinitions, table.Rows)
	}

	eventually(t, "the loaded rule carries its category", func() bool {
		for _, r := range env.engine.Rules() {
			if r.Name == pcr.Name {
				return r.Category == category
			}
		}
		return false
	})

	for _, bad := range []string{strings.Repeat("x", 65), "{{ x }}", "line\nbreak", " leading"} {
		bad := &policyv1alpha1.PortalClusterRule{
			ObjectMeta: metav1.ObjectMeta{Name: "category-bad"},
			Spec: policyv1alpha1.RuleSpec{
				Category: bad,
				Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}},
				Rule:     "false",
			},
		}
		if err := env.client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.category") {
			_ = env.client.Delete(ctx, bad)
			t.Errorf("category %q: created, or refused without naming spec.category: %v", bad.Spec.Category, err)
		}
	}
}
