package ruleset

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/vilaca/portal/test/bench/benchstat"
)

// failingBundle is size bytes of regex rules, each pattern unique to round,
// followed by a directive that does not parse: Coraza compiles (and caches)
// every pattern before it fails.
func failingBundle(round, size int) Bundle {
	var b strings.Builder
	for id := 1; b.Len() < size; id++ {
		fmt.Fprintf(&b, "SecRule ARGS \"@rx ^(?:")
		for w := 0; w < 200; w++ {
			if w > 0 {
				b.WriteByte('|')
			}
			fmt.Fprintf(&b, "r%dx%dw%d[a-z]{2,9}q", round, id, w)
		}
		fmt.Fprintf(&b, ")$\" \"id:%d,phase:1,deny\"\n", id)
	}
	b.WriteString("SecRuleEngine Sideways\n")
	return Join([]Source{{Name: "leak", Rules: b.String()}})
}

// benchRound makes each benchmark round's rules new to the process, across
// -count runs too.
var benchRound int

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestFailedCompilesReleasePatterns: a tenant who keeps pushing rule sets
// that fail to compile, each with new patterns, must not grow the process's
// live heap. Coraza caches every pattern a compile builds, owned by the WAF
// being built; a failed compile returns no WAF to close.
func TestFailedCompilesReleasePatterns(t *testing.T) {
	const rounds, size = 24, 64 << 10
	// One round first, so one-off allocations (the CRS files, Coraza's
	// registries) are not counted.
	if _, err := Compile(failingBundle(-1, size), Options{}); err == nil {
		t.Fatal("the failing bundle compiled")
	}
	before, rssBefore := benchstat.Memory(t)
	for round := range rounds {
		_, err := Compile(failingBundle(round, size), Options{})
		e, ok := AsError(err)
		if !ok || e.Kind() != KindInvalid || !strings.Contains(err.Error(), "Sideways") {
			t.Fatalf("round %d: want an invalid-rules error on SecRuleEngine, got %v", round, err)
		}
	}
	after, rssAfter := benchstat.Memory(t)
	grew := after - before
	t.Logf("live heap %d KiB before, %d KiB after %d failed compiles (%+d KiB)", before>>10, after>>10, rounds, grew>>10)
	t.Logf("resident %d KiB before, %d KiB after (%+d KiB)", rssBefore>>10, rssAfter>>10, (rssAfter-rssBefore)>>10)
	// Leaking, each round keeps several MiB of compiled automata.
	if limit := int64(8 << 20); grew > limit {
		t.Fatalf("live heap grew by %d MiB over %d failed compiles (limit %d MiB): the patterns of failed compiles stay cached", grew>>20, rounds, limit>>20)
	}
	// RE2's programs live outside Go's heap (go-re2 maps them): leaking, the
	// resident set grew by 36 MiB here and the live heap by under 4 MiB.
	if rss, limit := rssAfter-rssBefore, int64(12<<20); rss > limit {
		t.Fatalf("resident memory grew by %d MiB over %d failed compiles (limit %d MiB): the RE2 patterns of failed compiles stay cached", rss>>20, rounds, limit>>20)
	}
}

// TestFailedCompileKeepsLiveWAFsPatterns: releasing a failed compile's
// patterns leaves a live WAF that uses the same pattern working.
func TestFailedCompileKeepsLiveWAFsPatterns(t *testing.T) {
	const rule = "SecRuleEngine On\nSecRule ARGS:q \"@rx ^live[0-9]+pattern$\" \"id:1,phase:1,deny,status:403\"\n"
	live := mustCompile(t, Join([]Source{{Name: "live", Rules: rule}}))
	for range 3 {
		if _, err := Compile(Join([]Source{{Name: "bad", Rules: rule + "SecRuleEngine Sideways\n"}}), Options{}); err == nil {
			t.Fatal("the failing bundle compiled")
		}
	}
	tx := live.WAF.NewTransaction()
	defer tx.Close()
	tx.ProcessURI("/?q=live42pattern", "GET", "HTTP/1.1")
	if it := tx.ProcessRequestHeaders(); it == nil || it.Status != 403 {
		t.Fatalf("the live WAF no longer denies with its pattern after failed compiles released theirs: %+v", it)
	}
}

// BenchmarkFailedCompile compiles 64 KiB of new regex rules that fail on
// their last directive, and reports the live heap each failure leaves.
func BenchmarkFailedCompile(b *testing.B) {
	before := liveHeap()
	round := 0
	for b.Loop() {
		benchRound++
		if _, err := Compile(failingBundle(1000+benchRound, 64<<10), Options{}); err == nil {
			b.Fatal("the failing bundle compiled")
		}
		round++
	}
	b.ReportMetric(float64(int64(liveHeap())-int64(before))/float64(round), "retained-heap-B/op")
}
