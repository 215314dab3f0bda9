package main

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// wafProxyGCPercent is the waf-proxy's GOGC when the environment sets none.
// A transaction allocates a few hundred KB of short-lived garbage against a
// live heap of a few tens of MB (the compiled CRS), so at Go's default of
// 100 the collector runs every few dozen requests; at 400 it runs a quarter
// as often, for up to about five times the live heap.
const wafProxyGCPercent = 400

// runGCPercent is `portal run`'s GOGC when the environment sets none. The
// controller's live heap is small (about 7 MiB with admission on: schemes,
// rules, caches) and what it allocates per request is short-lived, so at
// Go's default of 100 the heap peaks near twice the live heap; at 50 it
// peaks near one and a half times, about 4 MiB less resident memory (see
// docs/performance.md, "Memory of portal run") for a collection every few
// dozen admission requests instead of every hundred or so.
const runGCPercent = 50

// evalGCPercent is `portal eval`'s GOGC when the environment sets none and
// the report's results go to a temporary file. The run's live heap is then
// the rules and a few batches in flight (about 8 MB with two jobs) while
// every pod evaluated allocates tens of KB, so at Go's default of 100 the
// collector ran every 9 ms (600 collections for 100,000 pods, 16% of the
// CPU, and the write barrier on for much of the rest); at 400 the same run
// takes a fifth less CPU for about 40 MB more peak memory (docs/
// performance.md, "16 cores"). A report held in memory (the table's
// failures, or no usable $TMPDIR) grows with the input: there 400 would
// multiply the peak, so those runs keep 100.
const evalGCPercent = 400

// collectLessOften sets evalGCPercent unless the environment sets GOGC.
func collectLessOften() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(evalGCPercent)
	}
}

// cgroupMemoryMax is where cgroup v2 publishes the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// applyGCDefaults sets GOGC to gcPercent unless the environment sets GOGC,
// and, unless it sets GOMEMLIMIT, a soft memory limit of 80% of the cgroup's
// memory.max when there is one: the Go runtime collects harder as the heap
// nears the soft limit, so a heap target above what the container may use
// (a large GOGC, or a cluster bigger than the limit was sized for) ends in
// more collections rather than in the OOM killer. It returns the GC percent
// and memory limit in force.
func applyGCDefaults(getenv func(string) string, memoryMaxFile string, percent int) (gcPercent int, memLimit int64) {
	if getenv("GOMEMLIMIT") == "" {
		if limit, ok := cgroupLimit(memoryMaxFile); ok {
			debug.SetMemoryLimit(limit / 5 * 4)
		}
	}
	if getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
	gcPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(gcPercent)
	return gcPercent, debug.SetMemoryLimit(-1)
}

// cgroupLimit reads a cgroup v2 memory.max: a byte count, or "max" for none.
func cgroupLimit(file string) (int64, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n <= 0 || n == math.MaxInt64 {
		return 0, false
	}
	return n, true
}
