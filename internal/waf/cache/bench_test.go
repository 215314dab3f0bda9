package cache

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkRevisionMemory reports the heap one cached revision takes, all of
// what it holds: a three-line CRS bundle (the cache stores SecLang text, not
// the compiled WAF) and a 64 KiB custom bundle with a data file.
func BenchmarkRevisionMemory(b *testing.B) {
	for _, tc := range []struct {
		name  string
		rules string
		files map[string][]byte
	}{
		{"crs", "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\n", nil},
		{"custom-64KiB", strings.Repeat("SecRule ARGS \"@rx x\" \"id:1,deny\"\n", 2000), map[string][]byte{"words.txt": make([]byte, 1<<14)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const revisions = 1000
			var perRevision float64
			for b.Loop() {
				c := New(nil, nil)
				before := heap()
				for i := range revisions {
					c.Put("ns/rs", fmt.Sprint(i), strings.Clone(tc.rules), tc.files)
				}
				perRevision += float64(heap()-before) / revisions
				runtime.KeepAlive(c)
			}
			b.ReportMetric(perRevision/float64(b.N), "heap-B/revision")
		})
	}
}

func heap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
