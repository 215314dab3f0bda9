package ruleset

// Coraza v3.8.1 caches compiled patterns (regexes, Aho-Corasick matchers)
// process-wide, each entry owned by the ids of the WAFs that use it and
// released by WAF.Close. coraza.NewWAF returns only an error for rules that
// fail after some directives compiled, so the half-built WAF is never
// closed and its patterns stay cached for the life of the process: a
// tenant pushing failing rule sets with new patterns grows every replica's
// memory without bound. Coraza exposes no way to close that WAF, so this
// file releases its owner id itself, with the two Coraza internals
// WAF.Close uses: the counter that numbers WAFs and the cache's Release.
// Both are pinned by go.mod (v3.8.1); a Coraza version that renames them
// fails to link, and TestFailedCompilesReleasePatterns checks the effect.

import (
	"sync/atomic"
	_ "unsafe" // go:linkname
)

//go:linkname wafIDCounter github.com/corazawaf/coraza/v3/internal/corazawaf.wafIDCounter
var wafIDCounter atomic.Uint64

//go:linkname releasePatterns github.com/corazawaf/coraza/v3/internal/memoize.Release
func releasePatterns(ownerID uint64)

// lastWAFID returns the id of the last WAF created in the process.
func lastWAFID() uint64 { return wafIDCounter.Load() }

// orphans collects the owner ids of WAFs Coraza failed to build, so that
// their patterns can be released together: locate's compiles of the same
// rules reuse them until then.
type orphans struct{ ranges [][2]uint64 }

// add records that the WAF Coraza failed to build has an id in
// (before, after].
func (o *orphans) add(before, after uint64) {
	o.ranges = append(o.ranges, [2]uint64{before, after})
}

// release releases the cached patterns of every recorded id. The failed
// WAF's id is in its range; other ids there belong to WAFs created
// concurrently, during the same compile. Releasing those is safe: a WAF
// keeps the patterns its rules use, the cache only shares them with later
// compiles, so the next compile of the same patterns builds them again.
func (o *orphans) release() {
	for _, r := range o.ranges {
		for id := r[1]; id > r[0]; id-- {
			releasePatterns(id)
		}
	}
	o.ranges = nil
}
