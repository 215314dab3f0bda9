package manifest

import (
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
	if _, err := docs[1].Objects(); err == nil || !strings.HasPrefix(err.Error(), "f.yaml:") || !strings.Contains(err.Error(), "line 10") {
		t.Fatalf("syntax error not located in the file: %v", err)
	}
	if _, err := docs[2].Objects(); err == nil || !strings.Contains(err.Error(), "f.yaml:12: object has no apiVersion or kind") {
		t.Fatalf("missing kind: %v", err)
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
