package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	src := []byte(`# File comment.

# Section comment, not a description.
# -- Fail closed:
# continued here.
failClosed: true
image:
  # -- The repository.
  repository: portal
# -- A documented map is one entry.
resources:
  requests: {cpu: 100m}
`)
	got, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{
		{Key: "failClosed", Type: "bool", Default: "true", Description: "Fail closed: continued here."},
		{Key: "image.repository", Type: "string", Default: `"portal"`, Description: "The repository."},
		{Key: "resources", Type: "object", Default: `{"requests":{"cpu":"100m"}}`, Description: "A documented map is one entry."},
	}
	if len(got) != len(want) {
		t.Fatalf("entries %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A value nobody documented cannot ship: the error names it and its line.
func TestParseRefusesUndocumentedValue(t *testing.T) {
	_, err := parse([]byte("# -- Documented.\na: 1\nb:\n  c: 2\n"))
	if err == nil || !strings.Contains(err.Error(), "line 4: b.c has no") {
		t.Errorf("parse: %v, want the undocumented b.c on line 4", err)
	}
}

// The committed reference is what the chart's values.yaml gives.
func TestValuesReferenceIsCurrent(t *testing.T) {
	if err := run("../../deploy/helm/portal/values.yaml", "../../docs/reference/helm-values.md", true); err != nil {
		t.Error(err)
	}
}

func TestCheckReportsStalePage(t *testing.T) {
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	page := filepath.Join(dir, "page.md")
	if err := os.WriteFile(values, []byte("# -- One.\na: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(values, page, true); err == nil || !strings.Contains(err.Error(), "run make helm-docs") {
		t.Errorf("check with no page: %v, want the out-of-date error", err)
	}
	if err := run(values, page, false); err != nil {
		t.Fatal(err)
	}
	if err := run(values, page, true); err != nil {
		t.Errorf("check right after writing: %v", err)
	}
}

// Whatever values.yaml holds, parse returns entries or an error; every
// entry it returns has a key and a description.
func FuzzParse(f *testing.F) {
	f.Add([]byte("# -- One.\na: 1\n"))
	f.Add([]byte("a:\n  # -- Nested.\n  b: [1, 2]\n"))
	f.Add([]byte("- not a map\n"))
	f.Add([]byte("# -- Anchor.\na: &x {b: 1}\n# -- Alias.\nc: *x\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		entries, err := parse(src)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Key == "" || e.Description == "" {
				t.Errorf("entry without key or description: %+v", e)
			}
		}
		_ = render(entries)
	})
}
