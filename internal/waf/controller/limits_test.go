package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// TestDuplicateReference: a RuleSet stored with a name listed twice (before
// the API server refused such lists) is rejected with DuplicateReference,
// before any RuleSource is read, so a large source listed 2,048 times is
// never joined 2,048 times.
func TestDuplicateReference(t *testing.T) {
	rs := &wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x"}}
	for range 2048 {
		rs.Spec.Sources = append(rs.Spec.Sources, wafv1alpha1.SourceReference{Name: "big"})
	}
	rej := duplicates(rs)
	if rej == nil || rej.reason != wafv1alpha1.ReasonDuplicateReference || !strings.Contains(rej.message, `RuleSource "big" more than once`) {
		t.Fatalf("sources: %+v", rej)
	}
	rs.Spec.Sources = rs.Spec.Sources[:1]
	rs.Spec.Data = []wafv1alpha1.DataReference{{Name: "d"}, {Name: "e"}, {Name: "d"}}
	if rej := duplicates(rs); rej == nil || !strings.Contains(rej.message, "spec.data") || !strings.Contains(rej.message, "entries 0 and 2") {
		t.Fatalf("data: %+v", rej)
	}
	rs.Spec.Data = rs.Spec.Data[:2]
	if rej := duplicates(rs); rej != nil {
		t.Fatalf("distinct names rejected: %+v", rej)
	}
}

// TestLastGoodBound: kept WAFs never weigh more than the limit; the oldest
// go first, a WAF heavier than the limit is not kept, and the metrics follow.
func TestLastGoodBound(t *testing.T) {
	m := NewMetrics(nil)
	l := newLastGood(100, m)
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	c := func(w int64) *ruleset.Compiled { return &ruleset.Compiled{Weight: w} }
	steps := []struct {
		name    string
		weight  int64
		closing int
		bytes   int64
	}{
		{"a", 40, 0, 40},
		{"b", 40, 0, 80},
		{"c", 40, 1, 80},  // a goes
		{"b", 30, 1, 70},  // b's previous WAF goes
		{"d", 200, 1, 70}, // too heavy: not kept
	}
	for _, s := range steps {
		if got := l.keep(key(s.name), c(s.weight)); len(got) != s.closing || l.bytes != s.bytes {
			t.Fatalf("keep %s/%d: %d to close, %d bytes; want %d, %d", s.name, s.weight, len(got), l.bytes, s.closing, s.bytes)
		}
	}
	if l.wafs[key("a")] != nil || l.wafs[key("d")] != nil || l.drop(key("c")) == nil || l.bytes != 30 {
		t.Fatalf("kept %v, %d bytes", l.order, l.bytes)
	}
}
