package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pocRulesDir = "../../examples/rules/poc"

// runCLI runs the portal command line with stdin and returns its
// standard output and error.
func runCLI(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	return out.String(), err
}

func exitCodeOf(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		return exitUsage
	}
	return exitOK
}

// TestMigrateRulesIdempotent migrates the POC examples, then feeds the output
// back through standard input: it must come out unchanged, in both formats.
func TestMigrateRulesIdempotent(t *testing.T) {
	for _, format := range []string{"cr", "folder"} {
		first, err := runCLI(t, "", "migrate-rules", "--format="+format, pocRulesDir)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if n := strings.Count(first, "\nrule: |-") + strings.Count(first, "\n  rule: |-"); n != 6 {
			t.Errorf("%s: want 6 rules in the output, found %d:\n%s", format, n, first)
		}
		second, err := runCLI(t, first, "migrate-rules", "--format="+format, "-")
		if err != nil {
			t.Fatalf("%s: second pass: %v", format, err)
		}
		if second != first {
			t.Errorf("%s: second pass changed the output:\n--- first\n%s--- second\n%s", format, first, second)
		}
	}
}

// TestMigrateRulesOutputDir writes one file per input, and the written folder
// loads in portal eval.
func TestMigrateRulesOutputDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := runCLI(t, "", "migrate-rules", "--format=folder", "--output-dir", dir, pocRulesDir); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) != 6 {
		t.Fatalf("want 6 files in %s, got %v", dir, files)
	}
	// Migrating the output directory onto itself changes nothing.
	before, _ := os.ReadFile(files[0])
	// -o is deprecated for --output-dir but still works.
	if _, err := runCLI(t, "", "migrate-rules", "--format=folder", "-o", dir, dir); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(files[0]); !bytes.Equal(before, after) {
		t.Errorf("re-migrating %s changed it:\n%s---\n%s", files[0], before, after)
	}
	_, err := runCLI(t, "", "eval", "--rules", dir, "--file", "../../internal/migrate/testdata/pods")
	if code := exitCodeOf(err); code != exitViolation {
		t.Errorf("portal eval on the migrated rules: exit %d (%v), want %d: the fixtures violate them", code, err, exitViolation)
	}
}

// TestMigrateRulesErrors checks bad input fails with exit status 2 and a
// located message, and that nothing is written.
func TestMigrateRulesErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: uses math\nseverity: low\nrule: T(java.lang.Math).random() > 0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args  []string
		stdin string
		want  []string
	}{
		{[]string{"migrate-rules", bad}, "", []string{bad + ":3:", `rule "uses math"`, "T(java.lang.Math)"}},
		{[]string{"migrate-rules", "-"}, "name: x\nrule: '#root.x'\n", []string{"<stdin>:2:", "variable reference #root"}},
		{[]string{"migrate-rules"}, "", []string{"needs at least one file"}},
		{[]string{"migrate-rules", "--format=xml", pocRulesDir}, "", []string{`format "xml"`}},
		{[]string{"migrate-rules", "--output-dir", dir, "-"}, "", []string{"--output-dir cannot name a file for standard input"}},
		{[]string{"migrate-rules", filepath.Join(dir, "missing.yaml")}, "", []string{"cannot read the rules to migrate: stat " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"}},
		{[]string{"migrate-rules", pocRulesDir, pocRulesDir}, "", []string{"is also produced by"}},
	}
	for _, tt := range tests {
		out, err := runCLI(t, tt.stdin, tt.args...)
		if code := exitCodeOf(err); code != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", tt.args, code, err, exitUsage)
			continue
		}
		if out != "" {
			t.Errorf("%v: wrote output despite the error:\n%s", tt.args, out)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not contain %q", tt.args, err, w)
			}
		}
	}
}

// TestEvalRefusesPOCRules guards the examples against being loaded as Portal
// rules by mistake: a POC rule has filter (unknown to Portal) or lacks
// match.gvk (required).
func TestEvalRefusesPOCRules(t *testing.T) {
	_, err := runCLI(t, "", "eval", "--rules", pocRulesDir, "--file", "../../internal/migrate/testdata/pods")
	if code := exitCodeOf(err); code != exitUsage {
		t.Fatalf("portal eval --rules %s: exit %d (%v), want %d", pocRulesDir, code, err, exitUsage)
	}
	for _, w := range []string{`privileged-container.yaml:5:1: unknown field "filter"`, "host-network.yaml:2:", "match.gvk is required"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}
