package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestEvalEvents replays the recorded audit log of examples/runtime through
// the cookbook's runtime rules: the exec is one finding per rule although
// the log holds its ResponseStarted, its ResponseComplete and a second exec
// within the deduplication window; the controller's Secret read and a plain
// pod create raise nothing. Each finding names its rule's category.
func TestEvalEvents(t *testing.T) {
	out, err := runCLI(t, "", "eval", "--rules", "../../examples/rules/runtime", "--events", "../../examples/runtime/audit.log",
		"--cluster-state", "../../examples/runtime/cluster.yaml", "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("exit code %d, want %d (%v)", code, exitViolation, err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var h runtimeHit
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		got = append(got, h.Rule+" "+h.Object.Namespace+"/"+h.Object.Name+" "+h.Category)
	}
	slices.Sort(got)
	want := []string{
		"alert-on-port-forward staging/api-7d9f Runtime",
		"alert-on-secret-read-by-a-human prod/db-credentials Runtime",
		"quarantine-on-exec-in-production prod/web-0 Runtime",
		"revoke-sa-token-on-exec prod/web-0 Runtime",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := runCLI(t, "", "eval", "--rules", "../../examples/rules/runtime", "--events", "../../examples/runtime/audit.log", "--file", "x.yaml"); exitCodeOf(err) != exitUsage {
		t.Errorf("--events with --file: %v, want a usage error", err)
	}
	if _, err := runCLI(t, "", "eval", "--rules", "../../examples/rules/runtime", "--events", "../../examples/runtime/audit.log", "--show-passes"); exitCodeOf(err) != exitUsage ||
		!strings.Contains(err.Error(), "--show-passes does not apply to --events") {
		t.Errorf("--events with --show-passes: %v, want a usage error naming the flag", err)
	}
}
