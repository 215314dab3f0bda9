package cache

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func gatewayTable(gw string, ruleSets ...TableRuleSet) *Table {
	t := &Table{Gateway: gw, Default: -1}
	for _, rs := range ruleSets {
		t.Policies = append(t.Policies, TablePolicy{Policy: "p", RuleSet: &rs})
	}
	t.Rows = []TableRow{{Route: "HTTPRoute/" + gw, Path: &StringMatch{Type: "PathPrefix", Value: "/"}, Policy: 0}}
	return t
}

func TestTableServedToItsNamespaceOnly(t *testing.T) {
	c, _, srv := testServer(t)
	if changed, err := c.PutTable("team-a", "gw", gatewayTable("team-a/gw", TableRuleSet{Namespace: "team-a", Name: "crs", UUID: "u1"})); err != nil || !changed {
		t.Fatalf("PutTable: %v %v", changed, err)
	}
	if changed, _ := c.PutTable("team-a", "gw", gatewayTable("team-a/gw", TableRuleSet{Namespace: "team-a", Name: "crs", UUID: "u1"})); changed {
		t.Fatal("the same table put twice reported a change")
	}
	resp, body := do(t, http.MethodGet, srv.URL+"/tables/team-a/gw", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `"uuid":"u1"`) {
		t.Fatalf("team-a reading its table: %d %s", resp.StatusCode, body)
	}
	cl, err := NewClient(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	cl.Token = func() (string, error) { return "team-a", nil }
	latest, err := cl.TableLatest(context.Background(), "team-a", "gw")
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cl.TableWithDigest(context.Background(), "team-a", "gw", latest.SHA256)
	if err != nil || tbl.Policies[0].RuleSet.UUID != "u1" {
		t.Fatalf("client: %+v %v", tbl, err)
	}
	if _, err := cl.TableWithDigest(context.Background(), "team-a", "gw", strings.Repeat("0", 64)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("a wrong digest was accepted: %v", err)
	}
	// Another namespace's token may not read it, nor learn whether it exists.
	for _, path := range []string{"/tables/team-a/gw", "/tables/team-a/gw/latest", "/tables/team-a/missing"} {
		if resp, body := doAs(t, "team-b", http.MethodGet, srv.URL+path, nil); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("team-b GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	if resp, _ := doAs(t, "", http.MethodGet, srv.URL+"/tables/team-a/gw", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	if resp, _ := do(t, http.MethodGet, srv.URL+"/tables/team-a/missing", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("missing table: %d", resp.StatusCode)
	}
	if resp, _ := do(t, http.MethodGet, srv.URL+"/tables/team-a/gw/x", nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed path: %d", resp.StatusCode)
	}
	c.DeleteTable("team-a", "gw")
	if resp, _ := do(t, http.MethodGet, srv.URL+"/tables/team-a/gw", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("deleted table: %d", resp.StatusCode)
	}
}

// A Gateway's data plane reads the rule sets of other namespaces its table
// runs, and only those: team-b's token reads team-a/crs while a team-b
// table references it, and not before or after.
func TestRuleSetReadableThroughTable(t *testing.T) {
	c, _, srv := testServer(t)
	// team-a's own table runs team-a/crs: that opens nothing to team-b.
	if _, err := c.PutTable("team-a", "gw", gatewayTable("team-a/gw", TableRuleSet{Namespace: "team-a", Name: "crs", UUID: "u1"})); err != nil {
		t.Fatal(err)
	}
	if resp, _ := doAs(t, "team-b", http.MethodGet, srv.URL+"/rules/team-a/crs", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("team-b read team-a/crs without a table of its own: %d", resp.StatusCode)
	}
	if _, err := c.PutTable("team-b", "gw", gatewayTable("team-b/gw", TableRuleSet{Namespace: "team-a", Name: "crs", UUID: "u1"})); err != nil {
		t.Fatal(err)
	}
	if resp, body := doAs(t, "team-b", http.MethodGet, srv.URL+"/rules/team-a/crs", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("team-b reading the rule set its table runs: %d %s", resp.StatusCode, body)
	}
	if resp, _ := doAs(t, "team-b", http.MethodGet, srv.URL+"/rules/team-a/plain", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("team-b read team-a/plain, which no table of its runs: %d", resp.StatusCode)
	}
	// A table of team-b does not open team-a's table.
	if resp, _ := doAs(t, "team-b", http.MethodGet, srv.URL+"/tables/team-a/gw", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("team-b read a team-a table: %d", resp.StatusCode)
	}
	c.DeleteTable("team-b", "gw")
	if resp, _ := doAs(t, "team-b", http.MethodGet, srv.URL+"/rules/team-a/crs", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("team-b still reads team-a/crs after its table stopped running it: %d", resp.StatusCode)
	}
}

func TestTableBounds(t *testing.T) {
	c := New(nil, nil)
	big := &Table{Gateway: "a/gw", Default: -1, Rows: make([]TableRow, MaxTableRows+1)}
	if _, err := c.PutTable("a", "gw", big); !errors.Is(err, ErrTableTooLarge) {
		t.Fatalf("rows: %v", err)
	}
	huge := &Table{Gateway: "a/gw", Default: -1, Rows: []TableRow{{Hostnames: []string{strings.Repeat("x", MaxTableBytes)}}}}
	if _, err := c.PutTable("a", "gw", huge); !errors.Is(err, ErrTableTooLarge) {
		t.Fatalf("bytes: %v", err)
	}
	if _, ok := c.GetTable("a", "gw"); ok {
		t.Fatal("a refused table is served")
	}
}
