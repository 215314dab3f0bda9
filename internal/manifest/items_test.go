package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"sigs.k8s.io/yaml"
)

// itemSeeds are Lists and JSON streams as kubectl, jq and helm write them,
// and the shapes around them that must not be cut as Lists.
var itemSeeds = []string{
	"apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: b\nkind: List\nmetadata:\n  resourceVersion: \"\"\n",
	"apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a}\n\n    # a comment\n    data: |\n      text\n\n        more\n  -\n    apiVersion: v1\n    kind: Pod\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: c\n",
	"apiVersion: v1\nkind: List\nitems:\n",
	"apiVersion: v1\nkind: List\nitems: []\n",
	"apiVersion: v1\nkind: List\nitems:\n  a: 1\n",
	"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\nitems:\n- apiVersion: v1\n  kind: Pod\n",
	"apiVersion: v1\nkind: List\nitems:\n-\n- 3\n- apiVersion: v1\n",
	"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  items:\n  - apiVersion: v1\n    kind: Pod\n",
	"items:\n- apiVersion: v1\n  kind: Pod\n",
	"apiVersion: v1\r\nkind: List\r\nitems:\r\n- apiVersion: v1\r\n  kind: Pod\r\n",
	"apiVersion: v1\nkind: List\nitems:\n- &a\n  apiVersion: v1\n  kind: Pod\n- *a\n",
	"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  x: 1\n y: 2\n",
	`{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}}], "metadata": {}}`,
	"{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n            \"apiVersion\": \"v1\",\n            \"kind\": \"Pod\"\n        }\n    ],\n    \"kind\": \"List\"\n}\n",
	`{"apiVersion": "v1", "kind": "List", "items": []}`,
	`{"apiVersion": "v1", "kind": "List", "items": [null, 1, "x", []]}`,
	`{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Pod"}], "items": []}`,
	`{"apiVersion": "v1", "kind": "List", "items": {"a": 1}}`,
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "s\"}{[", "labels": {"a": "\\"}}}`,
	"{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"n\": 1}\n{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"n\": 2.5e3}\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"Pod\"}{\"apiVersion\": \"v1\", \"kind\": \"Secret\"}",
	"{\"apiVersion\": \"v1\", \"kind\": \"Pod\"}\n---\napiVersion: v1\nkind: Pod\n---\n# c\n{\"apiVersion\": \"v1\", \"kind\": \"Pod\"}",
	"{\"apiVersion\": \"v1\", \"kind\": \"Pod\"} x\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"Pod\"",
	"{apiVersion: v1, kind: Pod}\n",
	"{}\n",
	"  apiVersion: v1\n  kind: Pod\n",
	"",
	"# only\n\n",
}

// objectsOf decodes docs' objects in order; the first error stops it.
func objectsOf(docs []Document) ([]map[string]any, error) {
	var out []map[string]any
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			out = append(out, o.Object)
		}
	}
	return out, nil
}

func itemsOf(in string) ([]Document, error) {
	return itemsFrom(strings.NewReader(in))
}

func itemsFrom(r io.Reader) ([]Document, error) {
	var docs []Document
	_, err := splitItems("f.yaml", r, func(d Document) bool {
		docs = append(docs, d)
		return true
	})
	return docs, err
}

// checkItems: where the whole documents read without error, the cut ones
// give the same objects in the same order, or an error (a List it cannot
// cut as the parser reads it fails the run, never reads differently).
func checkItems(t *testing.T, in string) (cut bool) {
	t.Helper()
	whole := Split("f.yaml", []byte(in))
	want, wantErr := objectsOf(whole)
	docs, readErr := itemsOf(in)
	// The reader sees the input a buffer at a time: read a byte at a time,
	// every string, escape and bracket straddles a buffer's end, and the
	// cut must not change.
	slow, slowErr := itemsFrom(iotest.OneByteReader(strings.NewReader(in)))
	if fmt.Sprint(slowErr) != fmt.Sprint(readErr) || !reflect.DeepEqual(slow, docs) {
		t.Fatalf("%q: read a byte at a time, cut into\n%+v (%v)\nelse\n%+v (%v)", in, slow, slowErr, docs, readErr)
	}
	got, gotErr := objectsOf(docs)
	tops := 0
	for _, d := range docs {
		if d.kind != listItem {
			tops++
		}
	}
	if wantErr != nil && readErr == nil && gotErr == nil && tops <= len(whole) {
		// Unless StreamItems read more documents than Split (JSON objects
		// one after another, which a document cannot hold), what fails
		// whole fails cut: never a pass instead.
		t.Fatalf("%q: fails whole (%v), read cut into %d objects", in, wantErr, len(got))
	}
	if wantErr != nil || readErr != nil || gotErr != nil {
		return false
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: cut into items reads\n%v\nwhole\n%v", in, got, want)
	}
	return true
}

func TestStreamItemsReadsAsWhole(t *testing.T) {
	for _, in := range itemSeeds {
		checkItems(t, in)
	}
}

func FuzzStreamItems(f *testing.F) {
	for _, s := range itemSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkItems(t, in)
	})
}

// TestStreamItemsCutsLists: the Lists kubectl writes, in JSON and YAML, are
// cut into one document per item, each located at its item, with nothing
// refused; JSON lines and concatenated objects read as one document each.
func TestStreamItemsCutsLists(t *testing.T) {
	var items []any
	for i := range 3 {
		items = append(items, map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": fmt.Sprint("p", i)}})
	}
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": items, "metadata": map[string]any{"resourceVersion": ""}}
	js, _ := json.MarshalIndent(list, "", "    ")
	ys, _ := yaml.Marshal(list)
	var lines strings.Builder
	for _, it := range items {
		b, _ := json.Marshal(it)
		lines.Write(b)
		lines.WriteByte('\n')
	}
	for _, c := range []struct {
		name, in string
		lines    []int
	}{
		{"json", string(js), []int{4, 11, 18, 1}},
		{"yaml", string(ys), []int{3, 7, 11, 1}},
		{"json-lines", lines.String(), []int{1, 2, 3}},
	} {
		if !checkItems(t, c.in) && c.name != "json-lines" {
			t.Fatalf("%s: refused:\n%s", c.name, c.in)
		}
		docs, err := itemsOf(c.in)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, d := range docs {
			got = append(got, d.Line)
		}
		if !reflect.DeepEqual(got, c.lines) {
			t.Fatalf("%s: documents at lines %v, want %v", c.name, got, c.lines)
		}
		objs, err := objectsOf(docs)
		if err != nil || len(objs) != 3 || objs[2]["metadata"].(map[string]any)["name"] != "p2" {
			t.Fatalf("%s: %v %v", c.name, objs, err)
		}
	}
}

// TestStreamItemsBoundsDocuments: a document, a List item or a JSON value
// past the bound fails the read instead of growing memory; the same input
// in smaller documents reads whole, however long.
func TestStreamItemsBoundsDocuments(t *testing.T) {
	big := strings.Repeat("x", 200)
	for _, in := range []string{
		"a: " + big + "\n",
		"apiVersion: v1\nkind: List\nitems:\n- a: " + big + "\n",
		`{"a": "` + big + `"}`,
		`{"items": [{"a": "` + big + `"}]}`,
		`{"items": [{"a": [` + strings.Repeat("1,", 100) + `1]}]}`,
	} {
		_, err := splitItemsMax("f", strings.NewReader(in), func(Document) bool { return true }, 100)
		if !errors.Is(err, errDocTooLarge) {
			t.Fatalf("%.40q: error %v, want the document bound", in, err)
		}
	}
	n := 0
	in := strings.Repeat("{\"a\": \""+strings.Repeat("y", 50)+"\"}\n", 1000)
	if _, err := splitItemsMax("f", strings.NewReader(in), func(Document) bool { n++; return true }, 100); err != nil || n != 1000 {
		t.Fatalf("%d documents, %v", n, err)
	}
}

// TestStreamItemsReadsLoneCRAsLineBreak: YAML reads a carriage return not
// followed by a line feed as a line break (files from old Mac tools, or
// mixed line ends), so a List item holding one reads as it does whole,
// instead of failing, or passing where the whole file fails.
func TestStreamItemsReadsLoneCRAsLineBreak(t *testing.T) {
	for _, in := range []string{
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\r  metadata:\r    name: a\n",
		"apiVersion: v1\r\nkind: List\r\nitems:\r\n- apiVersion: v1\r  kind: ConfigMap\r\n  metadata: {name: a}\r",
	} {
		if !checkItems(t, in) {
			t.Errorf("%q: not read, or read differently than whole", in)
		}
	}
}

// A document's buffer is sized like the one before it; a small document
// after a big one still holds no more than about its own size, in every
// shape the reader cuts, so a stream of both does not hold twice itself
// while it waits to be decoded.
func TestSmallDocumentAfterABigOneHoldsItsOwnSize(t *testing.T) {
	big := strings.Repeat("x", 256<<10)
	streams := map[string]string{
		"yaml documents":  "kind: ConfigMap\ndata:\n  k: " + big + "\n---\nkind: ConfigMap\n",
		"yaml list items": "kind: List\nitems:\n- kind: ConfigMap\n  data:\n    k: " + big + "\n- kind: ConfigMap\n",
		"json list items": `{"kind": "List", "items": [{"kind": "ConfigMap", "data": {"k": "` + big + `"}}, {"kind": "ConfigMap"}]}`,
	}
	for name, in := range streams {
		t.Run(name, func(t *testing.T) {
			docs, err := itemsOf(in)
			if err != nil {
				t.Fatal(err)
			}
			// The second ConfigMap (a List's envelope comes after its items).
			i := slices.IndexFunc(docs, func(d Document) bool {
				return bytes.Contains(d.Data, []byte("ConfigMap")) && len(d.Data) < 100
			})
			if i < 1 {
				t.Fatalf("no small ConfigMap after the big one in %d documents", len(docs))
			}
			if small := docs[i].Data; cap(small) > 2*len(small)+4096 {
				t.Fatalf("the small document after a big one: %d bytes in a buffer of %d", len(small), cap(small))
			}
		})
	}
}

// TestPlainLinesTakesTheLinesBeforeItsStop: the bulk copy stops at a line
// it leaves to readLine and takes the lines before it, so each line is
// walked once. Taking nothing when a CRLF or the bound was ahead made the
// reader walk the rest of its buffer again for every line (quadratic on a
// CRLF file).
func TestPlainLinesTakesTheLinesBeforeItsStop(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		max            int
	}{
		{"a CRLF line", "a: 1\nb: 2\nc: 3\r\nd: 4\n", "a: 1\nb: 2\n", MaxDocument},
		{"the document's bound", "a: 1\nb: 2\nc: 3\n", "a: 1\nb: 2\n", 10},
		{"a separator", "a: 1\n---\nb: 2\n", "a: 1\n", MaxDocument},
		{"a top-level items", "a: 1\nitems:\n- b\n", "a: 1\n", MaxDocument},
		{"a last line without its end", "a: 1\nb: 2", "a: 1\n", MaxDocument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &itemSplitter{br: bufio.NewReaderSize(&crLines{r: strings.NewReader(tc.in)}, streamBuffer), line: 1, max: tc.max}
			if _, err := s.br.Peek(1); err != nil {
				t.Fatal(err)
			}
			got := s.plainLines(nil)
			if string(got) != tc.want || s.line != 1+strings.Count(tc.want, "\n") {
				t.Fatalf("took %q (now at line %d), want %q", got, s.line, tc.want)
			}
			rest, _ := io.ReadAll(s.br)
			if string(got)+string(rest) != tc.in {
				t.Fatalf("took %q and left %q of %q", got, rest, tc.in)
			}
		})
	}
}
