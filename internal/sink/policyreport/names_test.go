package policyreport

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestWritersAdoptOnlyTheirOwnReports: with more than one writer in a
// cluster (split Deployments, an audit log reader per control-plane node),
// each adopts only the reports it wrote, even where a name could be another
// writer's shard: adopting one would rewrite or delete another writer's
// findings.
func TestWritersAdoptOnlyTheirOwnReports(t *testing.T) {
	report := func(name, shard, writer string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetName(name)
		labels := map[string]string{LabelManagedBy: ManagedBy, LabelShard: shard}
		if writer != "" {
			labels[LabelWriter] = writer
		}
		u.SetLabels(labels)
		return u
	}
	for _, c := range []struct {
		writer names
		report *unstructured.Unstructured
		shard  int
		owns   bool
	}{
		{ReportName, report("portal", "0", "portal"), 0, true},
		{ReportName, report("portal-3", "3", "portal"), 3, true},
		// Written before reports named their writer: all by the default one.
		{ReportName, report("portal-3", "3", ""), 3, true},
		{"portal-network", report("portal-network-2", "2", ""), 0, false},
		{"portal-network", report("portal-network-2", "2", "portal-network"), 2, true},
		{ReportName, report("portal-network", "0", "portal-network"), 0, false},
		// Shard 1 of portal-runtime-cp by its name, but node cp-1's report.
		{"portal-runtime-cp", report("portal-runtime-cp-1", "0", "portal-runtime-cp-1"), 0, false},
		{"portal-runtime-cp", report("portal-runtime-cp-1", "1", "portal-runtime-cp-1"), 0, false},
		{"portal-runtime-cp-1", report("portal-runtime-cp-1", "0", "portal-runtime-cp-1"), 0, true},
		{ReportName, report("portal-1", "2", "portal"), 0, false},
	} {
		i, ok := c.writer.shardOf(c.report)
		if ok != c.owns || i != c.shard {
			t.Errorf("writer %s, report %s %v: shard %d, own %v; want %d, %v", c.writer, c.report.GetName(), c.report.GetLabels(), i, ok, c.shard, c.owns)
		}
	}
}

// TestWriterNameFromAnyNodeName: a name made of a prefix and a node name of
// any length is a usable, distinct writer name.
func TestWriterNameFromAnyNodeName(t *testing.T) {
	long := "portal-runtime-" + strings.Repeat("control-plane.", 17) + "example"
	seen := map[string]string{}
	for _, n := range []string{"portal-runtime-cp-1", long, long + "2", long[:MaxNameLength], long[:MaxNameLength+1]} {
		w := WriterName(n)
		if err := CheckName(w); err != nil {
			t.Errorf("WriterName(%q) = %q: %v", n, w, err)
		}
		if len(n) <= MaxNameLength && w != n {
			t.Errorf("WriterName(%q) = %q, want it unchanged", n, w)
		}
		if other, dup := seen[w]; dup {
			t.Errorf("WriterName gives %q for both %q and %q", w, other, n)
		}
		seen[w] = n
	}
	for _, bad := range []string{"", "Portal", "portal_x", strings.Repeat("a", MaxNameLength+1)} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
}
