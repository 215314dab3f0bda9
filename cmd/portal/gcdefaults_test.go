package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// restoreGC puts the test binary's GC settings back after a test changed
// them.
func restoreGC(t *testing.T) {
	t.Helper()
	percent, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(percent)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestGCDefaults(t *testing.T) {
	dir := t.TempDir()
	limited := filepath.Join(dir, "memory.max")
	if err := os.WriteFile(limited, []byte("536870912\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unlimited := filepath.Join(dir, "memory.max.none")
	if err := os.WriteFile(unlimited, []byte("max\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("no environment: the command's GOGC and 80% of the cgroup limit", func(t *testing.T) {
		restoreGC(t)
		debug.SetGCPercent(100)
		gc, mem := applyGCDefaults(env(nil), limited, wafProxyGCPercent)
		if gc != wafProxyGCPercent || mem != 536870912/5*4 {
			t.Fatalf("GOGC %d, memory limit %d; want %d and %d", gc, mem, wafProxyGCPercent, 536870912/5*4)
		}
	})
	t.Run("the environment wins", func(t *testing.T) {
		restoreGC(t)
		debug.SetGCPercent(150)
		debug.SetMemoryLimit(1 << 40)
		gc, mem := applyGCDefaults(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "1TiB"}), limited, wafProxyGCPercent)
		if gc != 150 || mem != 1<<40 {
			t.Fatalf("GOGC %d, memory limit %d; want the environment's 150 and 1TiB", gc, mem)
		}
	})
	t.Run("no cgroup limit: no memory limit", func(t *testing.T) {
		restoreGC(t)
		debug.SetMemoryLimit(1 << 40)
		for _, file := range []string{unlimited, filepath.Join(dir, "absent")} {
			if _, mem := applyGCDefaults(env(nil), file, wafProxyGCPercent); mem != 1<<40 {
				t.Fatalf("%s: memory limit %d, want it left at 1TiB", file, mem)
			}
		}
	})
}

// TestEvalSetsItsGOGC: portal eval collects at its own GOGC when its
// results wait in a temporary file (a live heap of a few batches while it
// allocates tens of KB a pod), at Go's default when the report grows with
// the input (the table), and at the environment's GOGC when it sets one.
func TestEvalSetsItsGOGC(t *testing.T) {
	restoreGC(t)
	for _, tc := range []struct {
		gogc, output string
		want         int
	}{
		{"", "json", evalGCPercent},
		{"", "junit", evalGCPercent},
		{"", "table", 100},
		{"150", "json", 50}, // the runtime read the environment's at start: here, what the test set
	} {
		debug.SetGCPercent(50)
		t.Setenv("GOGC", tc.gogc)
		if _, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "-o", tc.output); exitCodeOf(err) != exitViolation {
			t.Fatalf("GOGC=%q -o %s: portal eval: %v", tc.gogc, tc.output, err)
		}
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("GOGC=%q -o %s: portal eval ran at GC percent %d, want %d", tc.gogc, tc.output, got, tc.want)
		}
	}
}
