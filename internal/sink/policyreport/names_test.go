package policyreport

import (
	"math/rand/v2"
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

// TestWriterNameFromAnyNodeName: a writer's name made of a prefix and any
// node name is usable, stays apart from every other's, and is never another
// writer's shard, whatever the node names (cp and cp-1, a node named 1, a
// node name at the length limit).
func TestWriterNameFromAnyNodeName(t *testing.T) {
	long := strings.Repeat("control-plane.", 17) + "example"
	nodes := []string{"cp", "cp-1", "cp-1-2", "1", "12", "10.0.0.1", "ip-10-0-0-1.ec2.internal", long, long + "2", long[:40], long[:41], long[:48] + "-1"}
	// Random node names: DNS subdomains of labels of a, 1 and -, as nodes
	// are named, up to 100 characters.
	rnd := rand.New(rand.NewPCG(1, 2))
	label := func() string {
		b := []byte(strings.Repeat("a", 1+rnd.IntN(24)))
		for i := range b {
			b[i] = "a1-"[rnd.IntN(3)]
		}
		b[0], b[len(b)-1] = "a1"[rnd.IntN(2)], "a1"[rnd.IntN(2)]
		return string(b)
	}
	for range 3000 {
		parts := make([]string, 1+rnd.IntN(4))
		for i := range parts {
			parts[i] = label()
		}
		nodes = append(nodes, strings.Join(parts, "."))
	}
	writers := map[string]string{ReportName: "the default writer", "portal-runtime": "the runtime Deployment"}
	for _, n := range nodes {
		w := WriterName("portal-runtime-" + n)
		if err := CheckName(w); err != nil {
			t.Errorf("node %q: WriterName = %q: %v", n, w, err)
			continue
		}
		if other, dup := writers[w]; dup && other != n {
			t.Errorf("WriterName gives %q for node %q and for %q", w, n, other)
		}
		writers[w] = n
	}
	for b := range writers {
		for i := range len(b) {
			if _, ok := writers[b[:i]]; ok && b[i] == '-' && endsInNumber(b[i:]) && !strings.Contains(b[i+1:], "-") {
				t.Errorf("writer %q is shard %s of writer %q", b, b[i+1:], b[:i])
			}
		}
	}
	if w := WriterName("portal-runtime-cp"); w != "portal-runtime-cp" {
		t.Errorf("WriterName(portal-runtime-cp) = %q, want it unchanged", w)
	}
	for _, bad := range []string{"", "Portal", "portal_x", strings.Repeat("a", MaxNameLength+1)} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
}
