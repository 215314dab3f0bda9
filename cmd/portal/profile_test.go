package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalProfile: --profile writes the profile asked for, of a run that
// found violations too (exit 1), and a kind or file it cannot write is a
// usage error before the run.
func TestEvalProfile(t *testing.T) {
	dir := t.TempDir()
	for kind, magic := range map[string]string{"cpu": "\x1f\x8b", "heap": "\x1f\x8b", "trace": "go 1."} {
		out := filepath.Join(dir, kind)
		_, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "--profile", kind, "--profile-output", out)
		if code := exitCodeOf(err); code != exitViolation {
			t.Fatalf("--profile %s: exit %d (%v), want %d", kind, code, err, exitViolation)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), magic) {
			t.Errorf("--profile %s wrote %d bytes starting %q, want a profile starting %q", kind, len(data), data[:min(len(data), 8)], magic)
		}
	}
	for _, args := range [][]string{
		{"--profile", "disk"},
		{"--profile", "cpu", "--profile-output", filepath.Join(dir, "missing", "cpu")},
	} {
		_, err := runCLI(t, "", append([]string{"eval", "--rules", evalRules, "--file", evalManifests}, args...)...)
		if code := exitCodeOf(err); code != exitUsage || !strings.Contains(err.Error(), "--profile") {
			t.Errorf("%v: exit %d (%v), want %d naming the flag", args, code, err, exitUsage)
		}
	}
}
