package rx

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	"github.com/wasilibs/go-re2/experimental"
)

// RE2 reports a search whose DFA cache filled, and which goes on in its NFA,
// with a line on standard error ("DFA out of memory: pattern length ...").
// go-re2's pure-Go build never turns RE2's log_errors option off (its cgo
// build does) and writes the module's standard error to os.Stderr. A client
// chooses the inputs, so every request could add lines to the container's
// log. The lines are counted instead (DFAFallbacks, exported by the
// waf-proxy as portal_waf_re2_dfa_fallbacks_total) and at most one a
// minute reaches standard error, with the count since the last.
//
// The hook is the standard-error writer of go-re2's process-wide WASI host,
// whose first two fields re2Host mirrors (stdout, stderr io.Writer). Pinned
// by go.mod (go-re2 v1.13.0); TestRE2LogLinesAreCounted checks the effect.
type re2Host struct {
	_      io.Writer // stdout
	stderr io.Writer
}

//go:linkname re2HostWASI github.com/wasilibs/go-re2/internal.hostWASI
var re2HostWASI *re2Host

// re2Log is the writer RE2's standard error goes to: the RE2 module is
// process-wide, so is what it writes.
var re2Log = &logSink{out: os.Stderr, every: time.Minute}

var hookOnce sync.Once

// hookRE2Log points RE2's standard error at re2Log. go-re2 builds its
// module on first use, so this compiles a pattern first; compile calls it
// before any other RE2 call, so nothing RE2 runs can be writing while the
// writer changes.
func hookRE2Log() {
	hookOnce.Do(func() {
		_, _ = compileRE2("a", experimental.CompileOptions{})
		re2HostWASI.stderr = re2Log
	})
}

// DFAFallbacks is how many searches RE2 has reported falling back from its
// DFA to its NFA because the DFA cache filled.
func DFAFallbacks() uint64 { return re2Log.fallbacks.Load() }

// logSink counts RE2's "DFA out of memory" lines and passes on at most one
// line of any kind per interval. RE2 writes each line whole, after an empty
// write.
type logSink struct {
	fallbacks atomic.Uint64

	mu         sync.Mutex
	out        io.Writer
	every      time.Duration
	last       time.Time
	suppressed uint64
}

func (s *logSink) Write(p []byte) (int, error) {
	for line := range bytes.SplitSeq(bytes.TrimRight(p, "\n"), []byte{'\n'}) {
		if len(line) > 0 {
			s.line(line)
		}
	}
	return len(p), nil
}

func (s *logSink) line(line []byte) {
	if bytes.HasPrefix(line, []byte("WARNING: All log messages before absl::InitializeLog()")) {
		return // once per process, about RE2's logging itself
	}
	if bytes.Contains(line, []byte("DFA out of memory")) {
		s.fallbacks.Add(1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Sub(s.last) < s.every {
		s.suppressed++
		return
	}
	s.last = now
	if s.suppressed > 0 {
		fmt.Fprintf(s.out, "%s (and %d more RE2 log lines since the last shown; see portal_waf_re2_dfa_fallbacks_total)\n", line, s.suppressed)
	} else {
		fmt.Fprintf(s.out, "%s\n", line)
	}
	s.suppressed = 0
}
