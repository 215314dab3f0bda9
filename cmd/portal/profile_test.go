package main

import (
	"io"
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

// TestEvalProfileOutputIsNotAnInputOrTheReport: --profile-output naming a
// file the run reads, or the report itself, is a usage error that leaves
// the file as it was (the profile's file is emptied before anything is
// read).
func TestEvalProfileOutputIsNotAnInputOrTheReport(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "pod.yaml")
	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: b}\nspec: {containers: [{name: c, image: nginx}]}\n"
	writeFile(t, manifest, pod)
	_, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", dir, "--profile", "cpu", "--profile-output", manifest)
	if code := exitCodeOf(err); code != exitUsage || !strings.Contains(err.Error(), "one of the files the run reads") {
		t.Errorf("profile into an input: exit %d (%v), want %d", code, err, exitUsage)
	}
	if b, _ := os.ReadFile(manifest); string(b) != pod {
		t.Errorf("the input was changed to %q", b)
	}

	report, err := os.Create(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close()
	cmd := newRootCommand()
	cmd.SetArgs([]string{"eval", "--rules", evalRules, "--file", evalManifests, "-o", "json", "--profile", "heap", "--profile-output", report.Name()})
	cmd.SetOut(report)
	cmd.SetErr(io.Discard)
	err = cmd.Execute()
	if code := exitCodeOf(err); code != exitUsage || !strings.Contains(err.Error(), "standard output") {
		t.Errorf("profile into the report: exit %d (%v), want %d", code, err, exitUsage)
	}
}
