package examples_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRuntimeCookbookShowsTheExamples: each page of docs/cookbook/runtime
// quotes its rule of rules/runtime verbatim, so the page shows what the
// tests load and replay.
func TestRuntimeCookbookShowsTheExamples(t *testing.T) {
	files, err := filepath.Glob("rules/runtime/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no runtime examples: %v", err)
	}
	for _, f := range files {
		rule, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		page := filepath.Join("..", "docs", "cookbook", "runtime", strings.TrimSuffix(filepath.Base(f), ".yaml")+".md")
		doc, err := os.ReadFile(page)
		if err != nil {
			t.Errorf("%s has no cookbook page: %v", f, err)
			continue
		}
		if !strings.Contains(string(doc), strings.TrimSpace(string(rule))) {
			t.Errorf("%s does not quote %s as it is", page, f)
		}
	}
}
