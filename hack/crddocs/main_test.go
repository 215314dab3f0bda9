package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed reference pages are what the generated CRDs give.
func TestCRDReferenceIsCurrent(t *testing.T) {
	if err := run("../../deploy/crds", "../../docs/reference/crd", true); err != nil {
		t.Error(err)
	}
}

const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.portal.io}
spec:
  group: portal.io
  names: {kind: Widget, plural: widgets, listKind: WidgetList, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Size, jsonPath: .spec.size, type: integer, priority: 1}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, format: int32, default: 3, minimum: 1, description: "Size of
                the widget | in parts."}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string, enum: [a, b]}
`

func widgetFixture(t *testing.T, page string) (crds, docs string) {
	t.Helper()
	crds, docs = t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(crds, "portal.io_widgets.yaml"), []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	if page != "" {
		if err := os.WriteFile(filepath.Join(docs, "widget.md"), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return crds, docs
}

// The generator fills the blocks, keeps the prose, and -check then passes;
// a stale page fails -check with the command that fixes it.
func TestRunWritesBlocksAndCheckFindsStalePage(t *testing.T) {
	page := "# Widget\n\nProse.\n\n<!-- generated:start columns x -->\nold\n<!-- generated:end columns -->\n\n" +
		"<!-- generated:start spec x -->\n<!-- generated:end spec -->\n\nMore prose.\n"
	crds, docs := widgetFixture(t, page)
	if err := run(crds, docs, true); err == nil || !strings.Contains(err.Error(), "make docs-generate") {
		t.Fatalf("check of a stale page: %v, want an error naming make docs-generate", err)
	}
	if err := run(crds, docs, false); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(docs, "widget.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Prose.", "More prose.",
		"| `Size` | `.spec.size` | integer | `-o wide` |",
		"Required: `size`.",
		"| `size` | integer (int32) | `3` | **required**; minimum 1 | Size of the widget \\| in parts. |",
		"| `tags` | []string |  | set; items enum: `a`, `b` |  |",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("page lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "old") {
		t.Errorf("the old block content survived:\n%s", got)
	}
	if err := run(crds, docs, true); err != nil {
		t.Errorf("check right after writing: %v", err)
	}
}

// A Portal CRD without its reference page, or a page without the markers,
// is an error: a new kind cannot ship undocumented.
func TestRunRefusesMissingPageOrMarkers(t *testing.T) {
	crds, docs := widgetFixture(t, "")
	if err := run(crds, docs, true); err == nil || !strings.Contains(err.Error(), "widget.md") {
		t.Errorf("no page: %v, want an error naming widget.md", err)
	}
	crds, docs = widgetFixture(t, "# Widget\n")
	if err := run(crds, docs, true); err == nil || !strings.Contains(err.Error(), "generated:start columns") {
		t.Errorf("no markers: %v, want an error naming the missing marker", err)
	}
}
