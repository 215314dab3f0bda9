package cache

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRegexInsts(t *testing.T) {
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`/api/v[0-9]+/users/[^/]+`, true},
		{`/(.*a){40}q`, true},
		{`/(.*a){60}q`, false}, // 32 bytes, over MaxRegexInsts
		{`\pL{1000}`, false},
		{`/` + strings.Repeat("a", MaxRegexBytes), false},
		{`((`, false},
	} {
		n, err := RegexInsts(tc.expr)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrUnsupportedMatch)) || n > MaxRegexInsts {
			t.Errorf("%.40s: %d instructions, %v", tc.expr, n, err)
		}
	}
	if _, err := RowInsts(TableRow{Headers: []StringMatch{{Type: MatchPathPrefix, Name: "x", Value: "/"}}}); !errors.Is(err, ErrUnsupportedMatch) {
		t.Errorf("a PathPrefix header match: %v", err)
	}
	n, err := RowInsts(TableRow{Path: &StringMatch{Type: MatchRegex, Value: "/a+"}, Headers: []StringMatch{{Type: MatchRegex, Value: "b+"}},
		Query: []StringMatch{{Type: MatchExact, Value: "c"}}})
	a, _ := RegexInsts("/a+")
	b, _ := RegexInsts("b+")
	if err != nil || n != a+b {
		t.Errorf("a row's instructions: %d %v, want %d", n, err, a+b)
	}
}

// A request host meets its own hostname's rows, every wildcard row and
// every row without a hostname; other hostnames have budgets of their own.
func TestRegexLoad(t *testing.T) {
	var l RegexLoad
	must := func(hosts []string, n int) {
		t.Helper()
		if err := l.Add(hosts, n); err != nil {
			t.Fatal(err)
		}
	}
	must(nil, 200)
	must([]string{"*.example.com"}, 200)
	must([]string{"a.example.com", "b.example.com"}, 600)
	must([]string{"c.example.com"}, 624)
	// a.example.com would meet 200 + 200 + 625.
	if err := l.Add([]string{"A.example.com"}, 25); !errors.Is(err, ErrTableTooLarge) || !strings.Contains(err.Error(), "a.example.com") {
		t.Fatalf("past the bound: %v", err)
	}
	// Rows for any host reach every host's budget.
	if err := l.Add([]string{""}, 1); !errors.Is(err, ErrTableTooLarge) {
		t.Fatalf("a hostless row past the bound: %v", err)
	}
	// A refused route counts nothing.
	if err := l.Add([]string{"d.example.com", "c.example.com"}, 1); err == nil {
		t.Fatal("c.example.com went past the bound")
	}
	must([]string{"d.example.com"}, 624)
	must(nil, 0)
}

func TestPutTableRefusesTooManyPolicies(t *testing.T) {
	tbl := &Table{Gateway: "a/gw", Default: -1}
	for i := range MaxTablePolicies + 1 {
		tbl.Policies = append(tbl.Policies, TablePolicy{Policy: fmt.Sprintf("a/p%d", i)})
	}
	if _, err := New(nil, nil).PutTable("a", "gw", tbl); !errors.Is(err, ErrTableTooLarge) {
		t.Fatalf("PutTable of %d policies: %v, want ErrTableTooLarge", len(tbl.Policies), err)
	}
}
