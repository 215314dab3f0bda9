package cache

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/validation"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestPutVersionsAndDedupes(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	c := New(clk, nil)
	files := map[string][]byte{"a.txt": []byte("x")}
	e1, created := c.Put("ns/rs", "id-1", "SecRuleEngine On", files)
	if !created || e1.UUID != "id-1" || !e1.Timestamp.Equal(t0) {
		t.Fatalf("first put: %+v %v", e1, created)
	}
	files["a.txt"][0] = 'y' // the cache holds its own copy
	if got, _ := c.Get("ns/rs"); string(got.DataFiles["a.txt"]) != "x" {
		t.Fatal("Put did not copy the data files")
	}
	clk.SetTime(t0.Add(time.Minute))
	if _, created := c.Put("ns/rs", "id-1", "SecRuleEngine On", nil); created || c.Revisions("ns/rs") != 1 {
		t.Fatal("same id as latest created a revision")
	}
	c.Put("ns/rs", "id-2", "SecRuleEngine Off", nil)
	e3, created := c.Put("ns/rs", "id-1", "SecRuleEngine On", nil) // reverted
	if !created || c.Revisions("ns/rs") != 2 || !e3.Timestamp.Equal(t0.Add(time.Minute)) {
		t.Fatalf("revert: created %v, %d revisions, %+v", created, c.Revisions("ns/rs"), e3)
	}
	if got, _ := c.Get("ns/rs"); got.UUID != "id-1" {
		t.Fatalf("latest is %s after revert", got.UUID)
	}
	if n, b := c.Stats(); n != 2 || b != int64(len("SecRuleEngine On")+len("SecRuleEngine Off")) {
		t.Fatalf("stats %d %d", n, b)
	}
	c.Delete("ns/rs")
	if _, ok := c.Get("ns/rs"); ok || len(c.Keys()) != 0 {
		t.Fatal("Delete left the key")
	}
	if n, b := c.Stats(); n != 0 || b != 0 {
		t.Fatalf("stats after delete %d %d", n, b)
	}
}

func TestGCByAgeKeepsLatest(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	m := NewMetrics(prometheus.NewRegistry())
	c := New(clk, m)
	c.Put("a/one", "1", "old", nil)
	clk.SetTime(t0.Add(2 * time.Hour))
	c.Put("a/one", "2", "newer", nil)
	c.Put("a/lonely", "3", "only revision, very old soon", nil)
	clk.SetTime(t0.Add(30 * time.Hour))
	byAge, bySize := c.GC(24*time.Hour, 0)
	if byAge != 1 || bySize != 0 {
		t.Fatalf("evicted %d by age, %d by size; want 1, 0", byAge, bySize)
	}
	if c.Revisions("a/one") != 1 || c.Revisions("a/lonely") != 1 {
		t.Fatal("a latest revision was evicted")
	}
	if e, _ := c.Get("a/one"); e.UUID != "2" {
		t.Fatalf("latest of a/one is %s", e.UUID)
	}
	clk.SetTime(t0.Add(1000 * time.Hour))
	if byAge, _ := c.GC(time.Nanosecond, 1); byAge != 0 || len(c.Keys()) != 2 {
		t.Fatal("GC evicted a latest revision")
	}
	if got := testutil.ToFloat64(m.Evictions.WithLabelValues("age")); got != 1 {
		t.Fatalf("age evictions metric %v", got)
	}
	if got := testutil.ToFloat64(m.Entries); got != 2 {
		t.Fatalf("entries metric %v", got)
	}
}

func TestGCBySizeOldestFirst(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	c := New(clk, nil)
	kb := strings.Repeat("x", 1000)
	// Interleave two keys so the oldest revisions belong to different keys.
	for i, key := range []string{"a/x", "b/y", "a/x", "b/y", "a/x", "b/y"} {
		clk.SetTime(t0.Add(time.Duration(i) * time.Minute))
		c.Put(key, string(rune('0'+i)), kb, nil)
	}
	// 6000 bytes; the two latest hold 2000. A 3500-byte limit evicts the
	// three oldest (0, 1, 2) and keeps 3 (b/y, older) with the latest 4 and 5.
	_, bySize := c.GC(0, 3500)
	if bySize != 3 {
		t.Fatalf("evicted %d by size, want 3", bySize)
	}
	if n, b := c.Stats(); n != 3 || b != 3000 {
		t.Fatalf("left %d entries, %d bytes", n, b)
	}
	if c.Revisions("a/x") != 1 || c.Revisions("b/y") != 2 {
		t.Fatalf("a/x %d, b/y %d revisions", c.Revisions("a/x"), c.Revisions("b/y"))
	}
	// A limit below the latest revisions alone evicts every older one and
	// never a latest.
	c.GC(0, 1)
	if e, ok := c.Get("a/x"); !ok || e.UUID != "4" {
		t.Fatalf("latest of a/x: %+v", e)
	}
	if e, ok := c.Get("b/y"); !ok || e.UUID != "5" {
		t.Fatalf("latest of b/y: %+v", e)
	}
	if n, _ := c.Stats(); n != 2 {
		t.Fatalf("%d entries left, want the 2 latest", n)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A bundle's name is served at /rules/{namespace}/{name} but is no name a
// Kubernetes object can have, so no RuleSet shares its cache key; only the
// exact form BundleName makes is accepted, and not as a Gateway's name.
func TestBundleNamesAreNoObjectNames(t *testing.T) {
	name := BundleName("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef")
	if name != "bundle:0123456789abcdef0123" {
		t.Fatalf("BundleName = %q", name)
	}
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		t.Fatalf("%q is a valid Kubernetes object name: a RuleSet could share its key", name)
	}
	if ns, got, latest, err := ParsePath("/rules/shop/" + name + "/latest"); err != nil || ns != "shop" || got != name || !latest {
		t.Fatalf("ParsePath of a bundle: %q %q %v %v", ns, got, latest, err)
	}
	for _, p := range []string{
		"/tables/shop/" + name, "/rules/shop/bundle:0123", "/rules/shop/bundle:0123456789ABCDEF0123",
		"/rules/shop/bundle:0123456789abcdef0123x", "/rules/shop/bundle:", "/rules/shop/xbundle:0123456789abcdef0123",
	} {
		parse := ParsePath
		if strings.HasPrefix(p, "/tables/") {
			parse = ParseTablePath
		}
		if _, _, _, err := parse(p); err == nil {
			t.Errorf("%s accepted", p)
		}
	}
}
