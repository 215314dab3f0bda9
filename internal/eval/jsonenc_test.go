package eval

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/vilaca/portal/internal/core"
)

// FuzzJSONString checks appendJSONString against encoding/json on any string.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "<>&", "\"\\", "\x00\b\f\n\r\t\x1f\x7f", "\u2028\u2029", "\xff", "é\xc3", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

// TestElemCacheEncodesAsAppendResultElem: a worker's cached parts give the
// bytes appendResultElem gives, result after result, whatever the order of
// objects and rules (objects repeat after others, rules share names and
// differ in the rest, strings need escaping).
func TestElemCacheEncodesAsAppendResultElem(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	// Objects that differ in one field only, one after another.
	resources := []Resource{
		{"v1", "Pod", "ns", "web"}, {"apps/v1", "Pod", "ns", "web"}, {"v1", "Service", "ns", "web"},
		{"v1", "Pod", "other", "web"}, {"v1", "Pod", "ns", "api"}, {"v1", "Pod", "", "web"},
		{"apps/v1", "Deployment", "a\"b", "<x>\n"},
	}
	rules := make([]*core.Rule, 8)
	for i := range rules {
		rules[i] = &core.Rule{Name: pick("r1", "r2", "ru\\le"), Severity: core.Severity(pick("high", "low")),
			Category: pick("", "Pod Security"), EnforcementAction: core.EnforcementAction(pick("deny", "warn", "dryrun"))}
	}
	var c elemCache
	var got, want []byte
	for range 2000 {
		res := resources[r.IntN(len(resources))]
		for range r.IntN(5) {
			rule := rules[r.IntN(len(rules))]
			x := Result{Resource: res, Rule: rule.Name, Severity: string(rule.Severity), Category: rule.Category,
				EnforcementAction: string(rule.EnforcementAction), Result: pick("pass", "fail"),
				Container: pick("", "c"), Message: pick("", "m \"q\""), Exception: pick("", "ns/e")}
			got = c.append(got, &x, rule)
			want = appendResultElem(want, &x)
		}
	}
	// A result whose rule fields are not its rule's (nothing fills them so
	// today) still gets its own.
	x := Result{Resource: resources[0], Rule: rules[0].Name + "-renamed", Severity: "low", EnforcementAction: "warn", Result: "fail"}
	got = c.append(got, &x, rules[0])
	want = appendResultElem(want, &x)
	var none *elemCache
	got = none.append(got, &x, rules[0])
	want = appendResultElem(want, &x)
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the cache's bytes differ from byte %d: got %q, want %q", i, got[i:min(i+80, len(got))], want[i:min(i+80, len(want))])
	}
}
