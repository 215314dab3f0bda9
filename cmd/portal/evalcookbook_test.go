package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalCrossResourceCookbook runs each cross-resource cookbook rule
// through `portal eval --cluster-state`, its fixture serving both as the
// manifests and as the cluster: exactly the objects named bad-* fail.
func TestEvalCrossResourceCookbook(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "rules", "cross-resource")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cookbook rules in %s: %v", dir, err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			state := filepath.Join(dir, "testdata", name, "cluster.yaml")
			out, err := runCLI(t, "", "eval", "--rules", file, "--file", state, "--cluster-state", state)
			if err != nil && exitCodeOf(err) != exitViolation {
				t.Fatalf("eval: %v\n%s", err, out)
			}
			failed := 0
			for _, line := range strings.Split(out, "\n") {
				fields := strings.Fields(line)
				if len(fields) < 5 || (fields[0] != "FAIL" && fields[0] != "ERROR") {
					continue
				}
				failed++
				parts := strings.Split(fields[4], "/")
				if fields[0] == "ERROR" || !strings.HasPrefix(parts[len(parts)-1], "bad-") {
					t.Errorf("unexpected result: %s", line)
				}
			}
			if want := strings.Count(readFile(t, state), "name: bad-"); failed != want {
				t.Errorf("%d objects failed, want the %d named bad-*:\n%s", failed, want, out)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
