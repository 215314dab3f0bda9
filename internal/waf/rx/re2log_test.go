package rx

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/wasilibs/go-re2/experimental"
)

// TestRE2LogLinesAreCounted: a search whose DFA cache fills makes RE2 write
// a line to standard error; a client can cause one per request. The lines
// are counted, and at most one per interval is passed on.
func TestRE2LogLinesAreCounted(t *testing.T) {
	hookRE2Log()
	var out bytes.Buffer
	re2Log.mu.Lock()
	savedOut, savedEvery := re2Log.out, re2Log.every
	re2Log.out, re2Log.every, re2Log.last, re2Log.suppressed = &out, time.Hour, time.Time{}, 0
	re2Log.mu.Unlock()
	t.Cleanup(func() {
		re2Log.mu.Lock()
		re2Log.out, re2Log.every = savedOut, savedEvery
		re2Log.mu.Unlock()
	})

	// A small memory bound and a pattern whose DFA has thousands of
	// states: each search on a long input fills the cache.
	re, err := compileRE2(`(?:a|b)*a(?:a|b){12}c`, experimental.CompileOptions{MaxMem: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	subject := make([]byte, 20000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range subject {
		subject[i] = "ab"[r.IntN(2)]
	}
	before := DFAFallbacks()
	for range 3 {
		if re.MatchString(string(subject)) {
			t.Fatal("matched a subject without c")
		}
	}
	if got := DFAFallbacks() - before; got < 3 {
		t.Errorf("%d RE2 log lines counted for 3 searches that filled the DFA cache, want at least 3", got)
	}
	re2Log.mu.Lock()
	shown := out.String()
	re2Log.mu.Unlock()
	if n := strings.Count(shown, "\n"); n != 1 || !strings.Contains(shown, "DFA out of memory") {
		t.Errorf("passed on %d lines, want the first only:\n%s", n, shown)
	}
}
