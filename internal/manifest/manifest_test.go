package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplitKeepsLines(t *testing.T) {
	data := "# leading comment\n\napiVersion: v1\nkind: A\n---\n\n---   \n# only a comment\n---\napiVersion: v1\r\nkind: B\n"
	docs := Split("f.yaml", []byte(data))
	if len(docs) != 2 {
		t.Fatalf("got %d documents", len(docs))
	}
	if docs[0].Line != 3 || docs[1].Line != 10 {
		t.Fatalf("lines %d, %d; want 3, 10", docs[0].Line, docs[1].Line)
	}
}

func TestSplitHandlesLongLines(t *testing.T) {
	long := strings.Repeat("x", 10<<20)
	docs := Split("f.yaml", []byte("apiVersion: v1\nkind: ConfigMap\ndata: {a: "+long+"}\n---\napiVersion: v1\nkind: Pod\n"))
	if len(docs) != 2 || docs[1].Line != 5 {
		t.Fatalf("a long line swallowed the documents after it: %d documents", len(docs))
	}
}

func TestObjects(t *testing.T) {
	docs := Split("f.yaml", []byte(`apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: a}}
- {apiVersion: v1, kind: Pod, metadata: {name: b}}
---
apiVersion: v1
kind: Pod
metadata:
  name: [broken
---
metadata: {name: nokind}
`))
	objs, err := docs[0].Objects()
	if err != nil || len(objs) != 2 || objs[1].GetName() != "b" {
		t.Fatalf("List: %v, %v", objs, err)
	}
	if _, err := docs[1].Objects(); err == nil || !strings.HasPrefix(err.Error(), "f.yaml:10: ") {
		t.Fatalf("syntax error not located in the file: %v", err)
	}
	if _, err := docs[2].Objects(); err == nil || !strings.Contains(err.Error(), "f.yaml:12: object has no apiVersion or kind") {
		t.Fatalf("missing kind: %v", err)
	}
}

// A plain rule handed over as a manifest (the rules' directory passed to
// --file) says so, instead of only that it has no kind.
func TestObjectsPlainRuleHint(t *testing.T) {
	docs := Split("rules/latest.yaml", []byte("name: no-latest\nmatch: {gvk: [{kind: Pod}]}\nrule: container.image.tag == \"latest\"\n---\nname: not-a-rule\n"))
	_, err := docs[0].Objects()
	want := "rules/latest.yaml:1: object has no apiVersion or kind: this is a plain Portal rule, not a Kubernetes object; rule files go to --rules"
	if err == nil || err.Error() != want {
		t.Fatalf("plain rule as a manifest: got %v, want %q", err, want)
	}
	if _, err := docs[1].Objects(); err == nil || strings.Contains(err.Error(), "plain Portal rule") {
		t.Fatalf("a document without rule got the rule hint: %v", err)
	}
}

// A chart's templates given as manifests fail to parse; the error says they
// look like templates and how to render them.
func TestTemplateHint(t *testing.T) {
	const hint = " (it holds {{ }}: a Helm or Go template? render it first, as in helm template CHART | portal eval --rules RULES --file -)"
	docs := Split("cm.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"))
	if _, err := docs[0].Objects(); err == nil || !strings.HasSuffix(err.Error(), hint) {
		t.Errorf("templated YAML: %v", err)
	}
	if _, err := Split("bad.yaml", []byte("a: [\n"))[0].Objects(); err == nil || strings.Contains(err.Error(), "template") {
		t.Errorf("a plain syntax error got the template hint: %v", err)
	}
	path := filepath.Join(t.TempDir(), "certificate.yaml")
	if err := os.WriteFile(path, []byte("{{- if .Values.tls }}\napiVersion: v1\nkind: Secret\n{{- end }}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var last error
	for _, err := range StreamItems([]string{path}, nil) {
		last = err
	}
	if last == nil || !strings.HasSuffix(last.Error(), hint) {
		t.Errorf("templated file: %v", last)
	}
}

func TestReadPathsStdinLimit(t *testing.T) {
	if _, err := ReadPaths([]string{"-"}, strings.NewReader(strings.Repeat("a", MaxStdin+1))); err == nil {
		t.Fatal("oversized stdin accepted")
	}
}

// FuzzObjects: any bytes give documents and objects or errors, never a panic.
func FuzzObjects(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Pod}]\n---\nx: [\n"))
	f.Add([]byte("---\n\r\n--- a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range Split("f", data) {
			objs, err := d.Objects()
			if err == nil {
				for _, o := range objs {
					if o.GetKind() == "" {
						t.Fatal("object without kind accepted")
					}
				}
			}
		}
	})
}

func TestDecodeMatchesKubectl(t *testing.T) {
	docs := Split("f.yaml", []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a, creationTimestamp: 2024-01-02T03:04:05Z}\nspec:\n  hostNetwork: yes\n  priority: 7\n  ratio: 0.5\n  1: numeric-key\n"))
	objs, err := docs[0].Objects()
	if err != nil {
		t.Fatal(err)
	}
	spec := objs[0].Object["spec"].(map[string]any)
	if spec["hostNetwork"] != true {
		t.Errorf("hostNetwork: yes = %#v, want true as kubectl reads it", spec["hostNetwork"])
	}
	if spec["priority"] != int64(7) || spec["ratio"] != 0.5 || spec["1"] != "numeric-key" {
		t.Errorf("numbers and keys: %#v", spec)
	}
	if ts := objs[0].GetCreationTimestamp(); ts.Year() != 2024 {
		t.Errorf("timestamp %v", ts)
	}
	j := Split("f.json", []byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}, "n": 3}`))
	if objs, err := j[0].Objects(); err != nil || objs[0].GetName() != "j" || objs[0].Object["n"] != int64(3) {
		t.Fatalf("JSON document: %v %v", objs, err)
	}
}
