//go:build linux

package benchstat

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
)

// Memory is this process's live Go heap and resident set, in bytes, each
// read after collections that return free memory to the OS. Tests that
// bound what a hostile input may retain check both: the resident set also
// counts memory outside Go's heap (RE2's programs), which the heap misses.
func Memory(tb testing.TB) (heap, resident int64) {
	tb.Helper()
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	debug.FreeOSMemory()
	st, err := ProcStatus(os.Getpid())
	if err != nil {
		tb.Fatalf("reading the resident set: %v", err)
	}
	return int64(m.HeapAlloc), st["VmRSS"] << 10
}
