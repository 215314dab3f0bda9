package ruleset

import (
	"runtime"
	"testing"
)

// BenchmarkCompileCRS compiles the full OWASP CRS. "cold" starts from an
// empty pattern cache, as the first compile in a process does; "warm" keeps
// one compiled revision alive, as the controller and waf-proxy do, so its
// regular expressions are reused from Coraza's process-wide cache.
func BenchmarkCompileCRS(b *testing.B) {
	bundle := Join([]Source{{Name: "crs", Rules: crsRules}})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			c, err := Compile(bundle, Options{})
			if err != nil {
				b.Fatal(err)
			}
			_ = c.Close()
		}
	})
	b.Run("warm", func(b *testing.B) {
		keep := mustCompile(b, bundle)
		_ = keep
		for b.Loop() {
			c, err := Compile(bundle, Options{})
			if err != nil {
				b.Fatal(err)
			}
			_ = c.Close()
		}
	})
}

// BenchmarkRevisionMemory reports the live heap one compiled full-CRS
// revision holds, alone (first) and next to another (shared patterns).
func BenchmarkRevisionMemory(b *testing.B) {
	bundle := Join([]Source{{Name: "crs", Rules: crsRules}})
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var first, second float64
	for b.Loop() {
		h0 := heap()
		c1 := mustCompileNoCleanup(b, bundle)
		h1 := heap()
		c2 := mustCompileNoCleanup(b, bundle)
		h2 := heap()
		first += float64(h1) - float64(h0)
		second += float64(h2) - float64(h1)
		_, _ = c1.Close(), c2.Close()
	}
	b.ReportMetric(first/float64(b.N), "heap-B/first-revision")
	b.ReportMetric(second/float64(b.N), "heap-B/next-revision")
}

func mustCompileNoCleanup(b *testing.B, bundle Bundle) *Compiled {
	c, err := Compile(bundle, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return c
}
