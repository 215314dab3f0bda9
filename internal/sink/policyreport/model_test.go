package policyreport

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/core"
	portalrule "github.com/vilaca/portal/internal/rule"
)

var rule = &core.Rule{Name: "r", Severity: core.SeverityHigh, Source: core.Source{Kind: "PortalClusterRule", Name: "r"}}

func objectFindings(name string, n int, msg string) core.ObjectFindings {
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: name}
	of := core.ObjectFindings{Object: ref}
	for i := range n {
		of.Findings = append(of.Findings, core.Finding{
			Result:    core.Result{Rule: rule, Resource: ref, Outcome: core.OutcomeFail, Container: fmt.Sprintf("c%d", i), Message: msg},
			FirstSeen: time.Unix(1700000000, 0),
		})
	}
	return of
}

func set(sc *scope, of core.ObjectFindings, lim limits) {
	r, b := renderObject(of)
	sc.set(of.Object.Key(), r, b, -1, lim, time.Time{}, time.Time{})
}

// Objects fill the lowest shard with room, stay in their shard while they
// fit, and the report of each shard respects both limits.
func TestShardPlacement(t *testing.T) {
	lim := limits{results: 10, bytes: 1 << 20}
	sc := newScope("ns")
	for i := range 25 {
		set(sc, objectFindings(fmt.Sprintf("p%02d", i), 1, "m"), lim)
	}
	if len(sc.shards) != 3 || len(sc.shards[0].objects) != 10 || len(sc.shards[2].objects) != 5 {
		t.Fatalf("shards: %d, want 3 of 10, 10, 5", len(sc.shards))
	}
	// An object that grows past its shard moves to the first with room.
	set(sc, objectFindings("p00", 3, "m"), lim)
	if got := sc.objects[core.ObjectKey{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p00"}].shard; got != 2 {
		t.Errorf("grown object in shard %d, want 2", got)
	}
	// A change that fits stays put.
	set(sc, objectFindings("p15", 1, "changed"), lim)
	if got := sc.objects[core.ObjectKey{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p15"}].shard; got != 1 {
		t.Errorf("changed object moved to shard %d, want 1", got)
	}
	// Removing every object of a shard leaves it empty for deletion.
	for i := 10; i < 20; i++ {
		set(sc, core.ObjectFindings{Object: objectFindings(fmt.Sprintf("p%02d", i), 0, "").Object}, lim)
	}
	if sh := sc.shards[1]; len(sh.objects) != 0 || !sh.dirty {
		t.Errorf("shard 1: %d objects, dirty %v; want empty and dirty", len(sh.objects), sh.dirty)
	}
	for i := range sc.shards {
		if sc.shards[i] == nil || len(sc.shards[i].objects) == 0 {
			continue
		}
		data, _, _, err := buildReport(formats[FormatWGPolicy], ReportName, nil, sc, i, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		u, size := &unstructured.Unstructured{}, len(data)
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		results, _, _ := unstructured.NestedSlice(u.Object, "results")
		fail, _, _ := unstructured.NestedInt64(u.Object, "summary", "fail")
		if len(results) > 10 || int(fail) != len(results) || size <= 0 {
			t.Errorf("shard %d: %d results, summary fail %d", i, len(results), fail)
		}
	}
}

// A byte limit shards as well as the result limit, long messages are cut,
// and an object too large for a whole report is cut to fit.
func TestReportBytesBounded(t *testing.T) {
	lim := limits{results: 1000, bytes: 64<<10 - reportOverhead}
	sc := newScope("ns")
	long := strings.Repeat("x", 5000)
	for i := range 200 {
		set(sc, objectFindings(fmt.Sprintf("p%03d", i), 1, long), lim)
	}
	if len(sc.shards) < 3 {
		t.Fatalf("%d shards for 200 results of ~1.3 KiB under 64 KiB", len(sc.shards))
	}
	set(sc, objectFindings("huge", 400, long), lim)
	for i := range sc.shards {
		data, _, _, err := buildReport(formats[FormatWGPolicy], ReportName, nil, sc, i, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 64<<10 {
			t.Errorf("shard %d is %d bytes", i, len(data))
		}
	}
	r, _ := renderObject(objectFindings("p", 1, long))
	if n := len(r[0].Message); n > MaxMessageBytes || !strings.HasSuffix(r[0].Message, "[truncated]") {
		t.Errorf("message of %d bytes, want cut to %d", n, MaxMessageBytes)
	}
}

// TestRulesCannotMatchTheReportKinds: every kind a report format writes is
// one the rule loader refuses to match (rule.OutputKinds), so a new format
// cannot reopen the report write loop.
func TestRulesCannotMatchTheReportKinds(t *testing.T) {
	for _, f := range formats {
		for _, kind := range []string{f.namespaced, f.clusterKind} {
			if gk := (schema.GroupKind{Group: f.gv.Group, Kind: kind}); !slices.Contains(portalrule.OutputKinds, gk) {
				t.Errorf("%s is written by the %s format but not in rule.OutputKinds", gk, f.name)
			}
		}
	}
}
